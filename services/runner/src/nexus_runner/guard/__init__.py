"""The runner's guard: the auto-approve dial, the shell command classifier and policy hooks.

`shell` classifies a command on its bash parse tree (tree-sitter), `table` holds the curated
data it uses, `policy` turns a call and the dial into run / ask, `hooks` applies the
operator's rules.
"""
