"""`nexus skills apply|ls|show`: skills (markdown with front matter) in the catalog."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer
from nexus_events.contract import subjects
from nexus_events.contract.documents import render_skill
from nexus_events.events import SkillDefinition
from nexus_events.transport.catalog_commands import apply_skill

from nexus_cli.apply_sources import PathsArg, apply_paths, file_option
from nexus_cli.client import Session, check_token, whoami
from nexus_cli.commands.agents import WaitOpt, wait_visible
from nexus_cli.documents import load_skills
from nexus_cli.errors import CliError, ExitCode
from nexus_cli.options import Output, OutputOpt, globals_of, run
from nexus_cli.output import console, emit, print_json
from nexus_cli.target import resolve_target

app = typer.Typer(help="Skills: apply from markdown, list, show.")

FileOpt = Annotated[list[Path] | None, file_option("A .md file or a directory of them")]


@app.command("apply")
def apply_cmd(
    ctx: typer.Context,
    file: FileOpt = None,
    paths: PathsArg = None,
    wait: WaitOpt = True,
    output: OutputOpt = Output.TABLE,
) -> None:
    """Validate every skill first (exit 2 and nothing sent if any is invalid), then apply.

    The name defaults to the file name without ``.md``.
    """
    g = globals_of(ctx)

    async def body() -> None:
        loaded = load_skills(apply_paths(file, paths))
        async with Session(resolve_target(g), g.timeout) as s:
            applied = []
            for item in loaded:
                skill = await s.publish_guarded(
                    apply_skill(s.bus, item.document, applied_by=whoami())
                )
                applied.append(
                    {"name": skill.name, "version": skill.version, "file": str(item.path)}
                )
            if wait:
                for item in loaded:
                    doc = item.document
                    await wait_visible(
                        s,
                        subjects.CORE_CATALOG_SKILLS_GET,
                        {"name": doc.name, "version": doc.version},
                        lambda r, doc=doc: SkillDefinition.model_validate(r["skill"]) == doc,
                        f"skill/{doc.name}@{doc.version}",
                    )
        if output is Output.JSON:
            print_json({"applied": applied})
        else:
            for a in applied:
                console.print(
                    f"skill/{a['name']}@{a['version']} applied ({a['file']})", markup=False
                )

    run(output, body)


@app.command("ls")
def ls_cmd(ctx: typer.Context, output: OutputOpt = Output.TABLE) -> None:
    """List skills with their version and revision."""
    g = globals_of(ctx)

    async def body() -> None:
        async with Session(resolve_target(g), g.timeout) as s:
            data = await s.query(subjects.CORE_CATALOG_SKILLS_LIST)
        rows = [
            (
                x["skill"]["name"],
                x["skill"]["version"],
                x["revision"],
                x["skill"].get("description"),
            )
            for x in data.get("skills", [])
        ]
        emit(
            output,
            data,
            ("NAME", "VERSION", "REV", "DESCRIPTION"),
            rows,
            empty="no skills; apply some with `nexus skills apply -f DIR`",
        )

    run(output, body)


@app.command("show")
def show_cmd(
    ctx: typer.Context,
    name: Annotated[str, typer.Argument(metavar="SKILL", help="Skill name.")],
    version: Annotated[str | None, typer.Option(help="A version (default: latest).")] = None,
    output: OutputOpt = Output.TABLE,
) -> None:
    """The skill as its markdown document (or JSON with -o json)."""
    g = globals_of(ctx)

    async def body() -> None:
        check_token(name, "skill name")
        query = {"name": name} | ({"version": version} if version else {})
        async with Session(resolve_target(g), g.timeout) as s:
            try:
                data = await s.query(subjects.CORE_CATALOG_SKILLS_GET, query)
            except CliError as exc:
                if exc.code is ExitCode.NOT_FOUND:
                    exc.hint = "`nexus skills ls`"
                raise
        if output is Output.JSON:
            print_json(data)
            return
        console.print(render_skill(SkillDefinition.model_validate(data["skill"])), markup=False)

    run(output, body)
