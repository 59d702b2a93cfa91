"""``tracediag completion bash|zsh|fish``: a shell completion script generated from the parser.

The scripts are static: subcommands, their options, the choices of options that have choices,
rule codes (and family prefixes) for ``--select``/``--extend-select``/``--ignore`` and ``rule``,
and file names wherever a path is expected, all read from the argparse parser and the rule
registry when the script is printed. Regenerate the script after upgrading tracediag.
"""

from __future__ import annotations

import argparse
from dataclasses import dataclass
from pathlib import Path

from tracediag import __version__
from tracediag.cli.common import codes

SHELLS = ("bash", "zsh", "fish")
#: Metavars of values that name files (``DIR`` completes directories).
_FILE_METAVARS = {"FILE", "DB", "PATH", "OUT"}


@dataclass(frozen=True)
class Values:
    """What completes a value: ``words``, rule ``codes`` (comma lists), ``files``, ``dirs``, or
    ``none`` (a value the shell cannot guess, e.g. a number)."""

    kind: str
    words: tuple[str, ...] = ()


@dataclass(frozen=True)
class Option:
    """An option of a subcommand: its flags, one line of help, and what completes its value."""

    flags: tuple[str, ...]
    help: str
    values: Values | None  # None: a flag without a value


@dataclass(frozen=True)
class Command:
    """A subcommand: its options and what completes each positional argument."""

    name: str
    help: str
    options: tuple[Option, ...]
    positionals: tuple[Values, ...]
    repeats_last: bool  # the last positional takes any number of words (``PATH...``)


def add_parser(commands, root: argparse.ArgumentParser) -> None:
    """Register ``completion`` on the subcommand parsers of ``root``, the parser it completes."""
    p = commands.add_parser(
        "completion",
        help="print a shell completion script (bash, zsh, fish)",
        description="Print a completion script for SHELL: subcommands, options, rule codes and "
        "file names. bash: 'source <(tracediag completion bash)' in ~/.bashrc; zsh: "
        "'tracediag completion zsh > ~/.zfunc/_tracediag' with ~/.zfunc on fpath; fish: "
        "'tracediag completion fish > ~/.config/fish/completions/tracediag.fish'.",
    )
    p.add_argument("shell", choices=SHELLS, help="the shell to complete in")
    p.set_defaults(run=run, root_parser=root)


def run(args: argparse.Namespace) -> int:
    """Print the script for ``args.shell``."""
    print(script(args.shell, args.root_parser), end="")
    return 0


def script(shell: str, parser: argparse.ArgumentParser) -> str:
    """The completion script for ``shell`` (one of :data:`SHELLS`) of ``parser``."""
    writers = {"bash": _bash, "zsh": _zsh, "fish": _fish}
    if shell not in writers:
        raise ValueError(f"unknown shell {shell!r} (choose from {', '.join(SHELLS)})")
    return writers[shell](describe(parser), rule_codes())


def rule_codes() -> list[str]:
    """What a rule selection accepts: ``ALL``, family prefixes and every rule code."""
    from tracediag.engine.rule import all_rules
    from tracediag.model.findings import FAMILIES

    return ["ALL", *FAMILIES, *all_rules()]


def describe(parser: argparse.ArgumentParser) -> list[Command]:
    """The subcommands of ``parser`` with their options and positionals."""
    sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    helps = {c.dest: c.help or "" for c in sub._choices_actions}
    out = []
    for name, p in sub.choices.items():
        options, positionals, repeats = [], [], False
        for action in p._actions:
            if action.help == argparse.SUPPRESS:
                continue
            if action.option_strings:
                takes = action.nargs != 0
                values = _values(action) if takes else None
                options.append(Option(tuple(action.option_strings), _short(action.help), values))
            else:
                positionals.append(_values(action))
                repeats = action.nargs in ("+", "*")
        out.append(
            Command(name, _short(helps.get(name, "")), tuple(options), tuple(positionals), repeats)
        )
    return out


def _values(action: argparse.Action) -> Values:
    if action.choices:
        return Values("words", tuple(str(c) for c in action.choices))
    if action.type is codes:
        return Values("codes")
    if action.dest == "code":  # `tracediag rule CODE`
        from tracediag.engine.rule import all_rules

        rules = all_rules()
        return Values("words", (*rules, *(cls.name for cls in rules.values())))
    if action.dest == "scenario":  # `tracediag generate SCENARIO`
        from tracediag.generator.scenarios import SCENARIOS

        return Values("words", tuple(SCENARIOS))
    if action.metavar == "DIR":
        return Values("dirs")
    if action.type is Path or action.metavar in _FILE_METAVARS:
        return Values("files")
    return Values("none")


def _short(text: str | None, width: int = 80) -> str:
    """The help on one line, cut to ``width`` (a description the shells show beside a name)."""
    text = " ".join((text or "").replace("%%", "%").split())
    return text if len(text) <= width else text[: width - 1] + "…"


def _sq(text: str) -> str:
    """``text`` single-quoted for bash, zsh and fish."""
    return "'" + text.replace("'", "'\\''") + "'"


def _header(shell: str, load: str) -> list[str]:
    return [
        f"# {shell} completion for tracediag {__version__}, generated by "
        f"`tracediag completion {shell}`.",
        f"# {load}",
        "",
    ]


# ---- bash ----------------------------------------------------------------------------------


_BASH_HELPERS = """\
_tracediag_words() { COMPREPLY=( $(compgen -W "$1" -- "$cur") ); }
_tracediag_files() { compopt -o filenames 2>/dev/null; COMPREPLY=( $(compgen -f -- "$cur") ); }
_tracediag_dirs() { compopt -o filenames 2>/dev/null; COMPREPLY=( $(compgen -d -- "$cur") ); }
_tracediag_codes() {
    # A comma-separated list: complete its last item, keep what comes before.
    local head="" last="$cur"
    if [[ "$cur" == *,* ]]; then head="${cur%,*},"; last="${cur##*,}"; fi
    COMPREPLY=( $(compgen -P "$head" -W "$_tracediag_rule_codes" -- "$last") )
}
"""


def _bash_complete(values: Values) -> str:
    return {
        "words": f"_tracediag_words {_sq(' '.join(values.words))}",
        "codes": "_tracediag_codes",
        "files": "_tracediag_files",
        "dirs": "_tracediag_dirs",
        "none": ":",
    }[values.kind]


def _bash_command(cmd: Command) -> list[str]:
    with_value = [o for o in cmd.options if o.values is not None]
    lines = [f"        {cmd.name})"]
    valopts = " ".join(f for o in with_value for f in o.flags)
    if with_value:
        lines.append('            case "$prev" in')
        for o in with_value:
            flags = "|".join(o.flags)
            lines.append(f"                {flags}) {_bash_complete(o.values)}; return ;;")
        lines.append("            esac")
    flags = " ".join(f for o in cmd.options for f in o.flags)
    lines.append(
        f'            if [[ "$cur" == -* ]]; then _tracediag_words {_sq(flags)}; return; fi'
    )
    if cmd.positionals:
        lines.append(f'            _tracediag_count_positionals "$i" {_sq(valopts)}')
        lines.append('            case "$npos" in')
        last = len(cmd.positionals) - 1
        for n, values in enumerate(cmd.positionals):
            pattern = "*" if n == last and cmd.repeats_last else str(n)
            lines.append(f"                {pattern}) {_bash_complete(values)} ;;")
        lines.append("            esac")
    lines.append("            ;;")
    return lines


def _bash(commands: list[Command], rule_codes: list[str]) -> str:
    names = " ".join(c.name for c in commands)
    lines = _header("bash", "Load it with: source <(tracediag completion bash)")
    lines.append(f"_tracediag_rule_codes={_sq(' '.join(rule_codes))}")
    lines.append(_BASH_HELPERS)
    lines += [
        "_tracediag_count_positionals() {",
        "    # npos: the words after the command (index $1) that are no option and no option's",
        "    # value ($2: the options that take one).",
        "    local j w",
        "    npos=0",
        "    for ((j = $1 + 1; j < COMP_CWORD; j++)); do",
        '        w="${COMP_WORDS[j]}"',
        '        if [[ "$w" == -* ]]; then',
        '            [[ " $2 " == *" $w "* ]] && ((j++))',
        "            continue",
        "        fi",
        "        ((npos++))",
        "    done",
        "}",
        "",
        "_tracediag() {",
        '    local cur="${COMP_WORDS[COMP_CWORD]}" prev="${COMP_WORDS[COMP_CWORD-1]}"',
        '    local cmd="" i npos=0',
        '    if [[ "$prev" == "=" ]]; then prev="${COMP_WORDS[COMP_CWORD-2]}"; fi',
        "    COMPREPLY=()",
        "    for ((i = 1; i < COMP_CWORD; i++)); do",
        '        if [[ "${COMP_WORDS[i]}" != -* ]]; then cmd="${COMP_WORDS[i]}"; break; fi',
        "    done",
        '    case "$cmd" in',
        '        "")',
        '            if [[ "$cur" == -* ]]; then _tracediag_words "--help --version"',
        "            # `tracediag PATH...` opens the terminal UI: complete a path once one is typed.",
        '            elif [[ "$cur" == */* || "$cur" == .* ]]; then _tracediag_files',
        f"            else _tracediag_words {_sq(names)}; fi",
        "            ;;",
    ]
    for cmd in commands:
        lines += _bash_command(cmd)
    lines += [
        "        *) _tracediag_files ;;",
        "    esac",
        "}",
        "",
        "complete -F _tracediag tracediag",
    ]
    return "\n".join(lines) + "\n"


# ---- zsh -----------------------------------------------------------------------------------


def _zsh_action(values: Values) -> str:
    return {
        "words": f"({' '.join(values.words)})",
        "codes": "_tracediag_codes",
        "files": "_files",
        "dirs": "_files -/",
        "none": " ",
    }[values.kind]


def _zsh_text(text: str) -> str:
    # Brackets and colons delimit _arguments specs.
    return text.replace("[", "(").replace("]", ")").replace(":", ",")


def _zsh_command(cmd: Command) -> list[str]:
    specs = []
    for o in cmd.options:
        for flag in o.flags:
            spec = f"{flag}[{_zsh_text(o.help)}]"
            if o.values is not None:
                spec += f":value:{_zsh_action(o.values)}"
            specs.append(_sq(spec))
    last = len(cmd.positionals) - 1
    for n, values in enumerate(cmd.positionals):
        where = "*" if n == last and cmd.repeats_last else str(n + 1)
        specs.append(_sq(f"{where}:argument:{_zsh_action(values)}"))
    body = " \\\n                ".join(specs) if specs else ""
    return [f"        {cmd.name}) _arguments {body} ;;"]


def _zsh(commands: list[Command], rule_codes: list[str]) -> str:
    lines = ["#compdef tracediag"]
    lines += _header(
        "zsh", "Load it with: tracediag completion zsh > ~/.zfunc/_tracediag (~/.zfunc on fpath)"
    )
    lines += [
        "_tracediag_codes() {",
        f"    _values -s , 'rule codes' {' '.join(rule_codes)}",
        "}",
        "",
        "_tracediag() {",
        '    local curcontext="$curcontext" state line',
        "    local -a commands",
        "    commands=(",
    ]
    lines += [f"        {_sq(f'{c.name}:{c.help}')}" for c in commands]
    lines += [
        "    )",
        "    _arguments -C '(- *)--version[print the version]' '(- *)'{-h,--help}'[show help]' \\",
        "        '1: :->command' '*:: :->args'",
        "    case $state in",
        "        command) _describe -t commands 'tracediag command' commands ;;",
        "        args)",
        "            case $words[1] in",
    ]
    lines += ["    " + line for cmd in commands for line in _zsh_command(cmd)]
    lines += [
        "                *) _files ;;",
        "            esac",
        "            ;;",
        "    esac",
        "}",
        "",
        'if [ "$funcstack[1]" = "_tracediag" ]; then',
        '    _tracediag "$@"',
        "else",
        "    compdef _tracediag tracediag",
        "fi",
    ]
    return "\n".join(lines) + "\n"


# ---- fish ----------------------------------------------------------------------------------


def _fish_values(values: Values) -> str:
    return {
        "words": f"-x -a {_sq(' '.join(values.words))}",
        "codes": "-x -a '(__tracediag_codes)'",
        "files": "-r -F",
        "dirs": "-x -a '(__fish_complete_directories)'",
        "none": "-x",
    }[values.kind]


def _fish_flags(flags: tuple[str, ...]) -> str:
    return " ".join(f"-l {f[2:]}" if f.startswith("--") else f"-s {f[1:]}" for f in flags)


def _fish(commands: list[Command], rule_codes: list[str]) -> str:
    names = " ".join(c.name for c in commands)
    lines = _header(
        "fish",
        "Load it with: tracediag completion fish > ~/.config/fish/completions/tracediag.fish",
    )
    lines += [
        "function __tracediag_codes",
        "    # A comma-separated list: offer each code after what the token already holds.",
        "    set -l head (string replace -r '[^,]*$' '' -- (commandline -ct))",
        f"    for code in {' '.join(rule_codes)}",
        "        echo $head$code",
        "    end",
        "end",
        "",
        f"set -l __tracediag_commands {names}",
        "complete -c tracediag -f",
        'set -l top "not __fish_seen_subcommand_from $__tracediag_commands"',
        "complete -c tracediag -n $top -l version -d 'print the version'",
    ]
    for cmd in commands:
        lines.append(f"complete -c tracediag -n $top -a {cmd.name} -d {_sq(cmd.help)}")
    for cmd in commands:
        when = _sq(f"__fish_seen_subcommand_from {cmd.name}")
        for o in cmd.options:
            value = f" {_fish_values(o.values)}" if o.values is not None else ""
            lines.append(
                f"complete -c tracediag -n {when} {_fish_flags(o.flags)}{value} -d {_sq(o.help)}"
            )
        kinds = {v.kind: v for v in cmd.positionals}
        for values in kinds.values():
            if values.kind == "words":
                lines.append(f"complete -c tracediag -n {when} -a {_sq(' '.join(values.words))}")
            elif values.kind in ("files", "dirs"):
                lines.append(f"complete -c tracediag -n {when} -F")
    return "\n".join(lines) + "\n"
