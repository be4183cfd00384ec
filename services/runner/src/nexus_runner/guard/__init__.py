"""The runner's guard: one pipeline judging every tool call, and the data it judges by.

`pipeline` runs the checks in order (plan mode, the grant, `refusals`, the `policy` dial, the
approval gate, `hooks`, then the JavaScript hooks) to one `verdict.Verdict`; `shell`
classifies a command on its bash parse tree (tree-sitter) with the curated data of `table`.
"""
