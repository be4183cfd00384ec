"""The curated decision table, as data: which programs read, write, reach the network or
destroy. docs/guardrails.md's table is generated from it (`python -m nexus_runner.guard.table`)
and a test checks the two agree."""

from __future__ import annotations

from typing import Final


def _words(text: str) -> frozenset[str]:
    return frozenset(text.split())


# Programs that only read (their file operands are still checked for escapes).
READ_ONLY: Final = _words(
    """cat head tail less more grep egrep fgrep rg ag find fd ls ll dir tree wc sort uniq diff cmp
    comm cut tr paste join column fold nl od hexdump xxd strings file stat du df pwd which whereis
    type echo printf true false test [ date cal sleep seq expr basename dirname realpath readlink
    id whoami uname hostname uptime ps env printenv jq yq awk sed md5sum sha1sum sha256sum
    cksum base64 tac rev look locale nproc free"""
)
# Programs that write, meant for the workspace (their operands are checked for escapes).
WORKSPACE_WRITE: Final = _words(
    """touch mkdir cp mv rm rmdir unlink ln tee install truncate chmod chown patch tar unzip zip
    gzip gunzip bzip2 xz split csplit make cmake ninja pytest python python3 node deno bun ruby perl
    php go cargo rustc gcc g++ cc clang javac java mvn gradle npm npx yarn pnpm tox nox black ruff
    isort mypy flake8 pylint eslint prettier tsc jest vitest bash sh zsh dash ksh uv poetry pip
    pip3"""
)
# Programs whose purpose is to reach another host.
NETWORK: Final = _words(
    """curl wget nc ncat netcat ssh scp sftp ftp telnet socat rsync dig nslookup host ping
    traceroute whois aws gcloud az gh kubectl helm docker podman ssh-keyscan openssl"""
)
# Programs that always ask: they act on the machine, not on the workspace.
DESTRUCTIVE: Final = _words(
    """sudo su doas mkfs fdisk parted dd shred wipefs mount umount shutdown reboot halt poweroff
    systemctl service crontab iptables nft useradd userdel usermod passwd chattr kill pkill
    killall eval source . exec"""
)
# Programs that run another command given as arguments: that command is what is judged.
WRAPPERS: Final = _words("time nice nohup timeout command builtin stdbuf ionice xargs")
# Sub-commands of multi-tool programs, by class.
GIT_READ: Final = _words(
    """status log diff show blame grep ls-files ls-tree rev-parse describe shortlog cat-file
    show-ref for-each-ref reflog whatchanged merge-base name-rev count-objects version help"""
)
GIT_NETWORK: Final = _words("push fetch pull clone ls-remote submodule remote-update")
GIT_DESTRUCTIVE: Final = _words("filter-branch filter-repo update-ref replace")
# git config keys that redirect pushes or run programs: setting them always asks.
GIT_CONFIG_DANGEROUS: Final = (
    "remote.",
    "url.",
    "core.hookspath",
    "core.sshcommand",
    "core.gitproxy",
    "core.fsmonitor",
    "alias.",
    "credential.",
    "http.proxy",
    "include.",
    "includeif.",
    "filter.",
    "diff.",
    "protocol.",
    "pushurl",
    "insteadof",
)
# Package managers: these sub-commands download.
PACKAGE_NETWORK: Final = {
    "pip": _words("install download"),
    "pip3": _words("install download"),
    "uv": _words("add sync lock pip run tool"),
    "poetry": _words("add install update lock"),
    "npm": _words("install i ci add publish update"),
    "yarn": _words("add install"),
    "pnpm": _words("add install i"),
    "cargo": _words("install fetch publish update"),
    "go": _words("get install mod"),
    "gem": _words("install"),
    "apt": _words("install update upgrade"),
    "apt-get": _words("install update upgrade"),
    "brew": _words("install"),
}
# Interpreters whose inline code (`python -c`, `node -e`) is read for what it does.
INLINE_CODE: Final = {
    "python": "-c",
    "python3": "-c",
    "node": "-e",
    "deno": "eval",
    "ruby": "-e",
    "perl": "-e",
    "php": "-r",
}
SHELLS: Final = _words("bash sh zsh dash ksh")
INLINE_NETWORK: Final = (
    "require('http",
    'require("http',
    "require('net",
    'require("net',
    "require('dns",
    'require("dns',
    "http.get",
    "https.get",
    "http.request",
    "https.request",
    "from http import",
    "file_get_contents(",
    "fsockopen",
    "curl_exec",
    "urllib",
    "socket",
    "requests",
    "http.client",
    "httpx",
    "aiohttp",
    "fetch(",
    "net/http",
    "xmlhttprequest",
    "ftplib",
    "smtplib",
    "telnetlib",
    "net::http",
    "open-uri",
    "lwp",
    "io::socket",
    "websocket",
    "paramiko",
)
INLINE_DESTRUCTIVE: Final = (
    "rmtree",
    "os.remove",
    "os.unlink",
    "os.system",
    "subprocess",
    "child_process",
    "exec(",
    "eval(",
    "popen",
    "spawn",
    "unlinksync",
    "rmsync",
    "fileutils.rm",
    "system(",
    "__import__",
    "importlib",
    "ctypes",
)
# Places whose writes are destructive (relative to the home directory or absolute).
SENSITIVE_HOME: Final = (
    ".ssh",
    ".aws",
    ".gnupg",
    ".config",
    ".bashrc",
    ".profile",
    ".bash_profile",
    ".zshrc",
    ".gitconfig",
    ".netrc",
    ".docker",
    ".kube",
    ".npmrc",
    ".pypirc",
    ".local",
)
SENSITIVE_ROOTS: Final = (
    "/etc",
    "/usr",
    "/bin",
    "/sbin",
    "/lib",
    "/lib64",
    "/boot",
    "/dev",
    "/sys",
    "/proc",
    "/var",
    "/root",
    "/home",
    "/opt",
    "/srv",
)
# bash's own network "files": a redirection to one opens a connection.
NETWORK_PATHS: Final = ("/dev/tcp/", "/dev/udp/")
# Absolute paths any command may use: not an escape.
HARMLESS_PATHS: Final = _words(
    "/dev/null /dev/stdin /dev/stdout /dev/stderr /dev/zero /dev/urandom /dev/random /dev/tty"
)
# Environment assignments that change what a command runs or where git pushes.
DANGEROUS_ASSIGNMENTS: Final = (
    "LD_PRELOAD",
    "LD_LIBRARY_PATH",
    "PATH",
    "GIT_SSH",
    "GIT_SSH_COMMAND",
    "GIT_CONFIG",
    "GIT_DIR",
    "GIT_EXEC_PATH",
    "PYTHONPATH",
    "BASH_ENV",
    "ENV",
    "PROMPT_COMMAND",
    "IFS",
)
# Programs whose first operand is a pattern or program text, not a path.
PATTERN_FIRST: Final = _words("grep egrep fgrep rg ag awk sed jq yq")
# Programs whose operands are text, never paths.
TEXT_ONLY: Final = _words("echo printf true false test [ expr sleep seq date cal")


def markdown_table() -> str:
    """The docs table: each class with the programs the table puts in it."""
    rows = [
        ("read_only", READ_ONLY, "runs under curated"),
        ("workspace_write", WORKSPACE_WRITE, "runs under curated"),
        ("network", NETWORK, "asks under curated"),
        ("destructive", DESTRUCTIVE, "asks whatever the dial"),
        ("(wrapper: the wrapped command is judged)", WRAPPERS, ""),
        ("git, read_only sub-commands", GIT_READ, "runs under curated"),
        ("git, network sub-commands", GIT_NETWORK, "asks under curated"),
        ("git, destructive sub-commands", GIT_DESTRUCTIVE, "asks whatever the dial"),
    ]
    from nexus_runner.guard.shell import HANDLED  # shell imports this module: import late

    rows.append(("(own rules, see below)", HANDLED, "by their arguments"))
    lines = ["| class | programs | decision |", "|---|---|---|"]
    lines += [f"| {c} | {' '.join(f'`{p}`' for p in sorted(ps))} | {d} |" for c, ps, d in rows]
    return "\n".join(lines)


if __name__ == "__main__":
    print(markdown_table())
