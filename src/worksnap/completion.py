"""Completion: shell completion scripts for bash, zsh and fish, written from the parser.

`worksnap completion SHELL` prints one. Every command, option and choice comes from
`arguments.build_parser()`, so a new option completes without touching this module.
A ref completes to `latest`, `latest~1` and `step:`; a path or directory to files.
"""

from __future__ import annotations

import argparse
import re

_REF_WORDS = "latest latest~1 step:"
_DIR_OPTIONS = {"--root", "--store", "--to"}
_FILE_POSITIONALS = {"paths", "path"}


class _Command:
    """What completes after one command: its options, its positionals' words."""

    def __init__(self, name: str, summary: str, parser: argparse.ArgumentParser) -> None:
        self.name = name
        self.summary = summary
        self.options: list[tuple[list[str], str, bool]] = []  # (spellings, help, takes value)
        self.words: list[str] = []  # what its positionals complete to
        self.files = False
        for action in parser._actions:
            if action.option_strings:
                if action.help != argparse.SUPPRESS:
                    takes = action.nargs != 0
                    self.options.append((list(action.option_strings), action.help or "", takes))
            elif action.choices:
                self.words += [str(c) for c in action.choices]
            elif action.dest in ("ref", "ref2"):
                self.words += _REF_WORDS.split()
            elif action.dest in _FILE_POSITIONALS:
                self.files = True


def _commands(parser: argparse.ArgumentParser) -> tuple[list[_Command], list[_Command]]:
    """The commands, and (as a pseudo-command) the options of `worksnap` itself."""
    found: list[_Command] = []
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            helps = {c.dest: c.help or "" for c in action._choices_actions}
            for name, sub in action.choices.items():
                found.append(_Command(name, helps.get(name, ""), sub))
    top = _Command("", "", parser)
    return found, [top]


def script(shell: str, parser: argparse.ArgumentParser) -> str:
    """The completion script for `shell` ("bash", "zsh" or "fish")."""
    commands, (top,) = _commands(parser)
    return {"bash": _bash, "zsh": _zsh, "fish": _fish}[shell](commands, top)


def _bash(commands: list[_Command], top: _Command) -> str:
    globals_ = " ".join(s for spellings, _, _ in top.options for s in spellings)
    valued = "|".join(s for spellings, _, takes in top.options if takes for s in spellings)
    cases = []
    for c in commands:
        options = " ".join(s for spellings, _, _ in c.options for s in spellings)
        cases.append(
            f'        {c.name}) opts="{options}"; words="{" ".join(c.words)}"; '
            f"files={int(c.files)} ;;"
        )
    dirs = "|".join(sorted(_DIR_OPTIONS))
    return f"""# worksnap completion for bash; load it with: source <(worksnap completion bash)
_worksnap() {{
    local cur="${{COMP_WORDS[COMP_CWORD]}}" prev="${{COMP_WORDS[COMP_CWORD-1]}}"
    local i cmd="" opts="" words="" files=0
    for ((i = 1; i < COMP_CWORD; i++)); do
        case "${{COMP_WORDS[i]}}" in
            {valued}) ((i++)) ;;
            --) break ;;
            -*) ;;
            *) cmd="${{COMP_WORDS[i]}}"; break ;;
        esac
    done
    case "$prev" in
        {dirs}) COMPREPLY=($(compgen -d -- "$cur")); return ;;
        --session|--label|--step|--kind|--meta|--attach|--exclude|--every|--idle|--limit|\\
        --keep-last|--max-age|--max-bytes|--drop-session|--max-file-bytes) return ;;
    esac
    if [[ -z "$cmd" ]]; then
        COMPREPLY=($(compgen -W "{" ".join(c.name for c in commands)} {globals_}" -- "$cur"))
        return
    fi
    case "$cmd" in
{chr(10).join(cases)}
    esac
    if [[ "$cur" == -* ]]; then
        COMPREPLY=($(compgen -W "$opts {globals_}" -- "$cur"))
        return
    fi
    COMPREPLY=($(compgen -W "$words" -- "$cur"))
    if ((files)); then
        COMPREPLY+=($(compgen -f -- "$cur"))
    fi
}}
complete -o filenames -F _worksnap worksnap
"""


def _zsh_text(text: str) -> str:
    """Help text as it may stand inside `[...]` of a zsh `_arguments` spec."""
    text = re.sub(r"\s+", " ", text.replace("%", "%%"))
    return text.replace("\\", "\\\\").replace("[", "(").replace("]", ")").replace("'", "'\\''")


def _zsh_options(options: list[tuple[list[str], str, bool]]) -> list[str]:
    specs = []
    for spellings, help_text, takes in options:
        value = ""
        if takes:
            kind = "_files -/" if spellings[0] in _DIR_OPTIONS else " "
            value = f":value:{kind}"
        names = spellings[0] if len(spellings) == 1 else "{" + ",".join(spellings) + "}"
        exclusive = f"({' '.join(spellings)})" if len(spellings) > 1 else ""
        specs.append(f"'{exclusive}{names}[{_zsh_text(help_text)}]{value}'")
    return specs


def _zsh(commands: list[_Command], top: _Command) -> str:
    described = "\n".join(f"    '{c.name}:{_zsh_text(c.summary)}'" for c in commands)
    cases = []
    for c in commands:
        specs = _zsh_options(c.options)
        words = " ".join(c.words)
        if c.words and c.files:
            specs.append(f'\'*:arg:_alternative "refs:ref:({words})" "files:file:_files"\'')
        elif c.words:
            specs.append(f"'*:arg:({words})'")
        elif c.files:
            specs.append("'*:file:_files'")
        body = " \\\n                ".join(specs) if specs else "''"
        cases.append(f"        {c.name})\n            _arguments {body} ;;")
    top_specs = " \\\n        ".join(_zsh_options(top.options))
    return f"""#compdef worksnap
# worksnap completion for zsh: save as _worksnap in a directory of $fpath
# (worksnap completion zsh > ~/.zfunc/_worksnap; then fpath+=(~/.zfunc) before compinit)
_worksnap() {{
  local curcontext="$curcontext" state line
  local -a commands
  commands=(
{described}
  )
  _arguments -C \\
        {top_specs} \\
        '1:command:->command' \\
        '*::arg:->args'
  case $state in
    command) _describe -t commands 'worksnap command' commands ;;
    args)
      case $line[1] in
{chr(10).join(cases)}
      esac ;;
  esac
}}
if [[ "${{funcstack[1]}}" == _worksnap ]]; then
  _worksnap "$@"
else
  compdef _worksnap worksnap
fi
"""


def _fish_text(text: str) -> str:
    return re.sub(r"\s+", " ", text).replace("\\", "\\\\").replace("'", "\\'")


def _fish(commands: list[_Command], top: _Command) -> str:
    names = " ".join(c.name for c in commands)
    lines = [
        "# worksnap completion for fish:",
        "# worksnap completion fish > ~/.config/fish/completions/worksnap.fish",
        "complete -c worksnap -f",
    ]
    for spellings, help_text, takes in top.options:
        lines.append(_fish_option(spellings, help_text, takes, ""))
    for c in commands:
        lines.append(
            f"complete -c worksnap -n 'not __fish_seen_subcommand_from {names}' "
            f"-a {c.name} -d '{_fish_text(c.summary)}'"
        )
        when = f"__fish_seen_subcommand_from {c.name}"
        for spellings, help_text, takes in c.options:
            lines.append(_fish_option(spellings, help_text, takes, when))
        if c.words:
            lines.append(f"complete -c worksnap -n '{when}' -a '{' '.join(c.words)}'")
        if c.files:
            lines.append(f"complete -c worksnap -n '{when}' -F")
    return "\n".join(lines) + "\n"


def _fish_option(spellings: list[str], help_text: str, takes: bool, when: str) -> str:
    parts = ["complete -c worksnap"]
    if when:
        parts.append(f"-n '{when}'")
    for spelling in spellings:
        parts.append(f"-l {spelling[2:]}" if spelling.startswith("--") else f"-s {spelling[1:]}")
    if takes:
        parts.append("-r -F" if spellings[0] in _DIR_OPTIONS else "-r")
    parts.append(f"-d '{_fish_text(help_text)}'")
    return " ".join(parts)
