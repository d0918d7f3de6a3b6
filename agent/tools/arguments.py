"""Reading a program's argument list the way getopt-style programs do: options, operands, values.

The command rules need to know which words a program treats as paths (its operands, or the
value of an option like `-o`) without knowing each program's full syntax; these conventions
cover the programs the rules look at.
"""

from __future__ import annotations


def names(text: str) -> frozenset[str]:
    """The set of space-separated program or option names in text (tables read as prose)."""
    return frozenset(text.split())


def operands(args: list[str]) -> tuple[list[str], list[str]]:
    """(options, operands) of an argument list, honouring `--`."""
    options: list[str] = []
    found: list[str] = []
    only_operands = False
    for arg in args:
        if only_operands or not arg.startswith("-") or arg == "-":
            found.append(arg)
        elif arg == "--":
            only_operands = True
        else:
            options.append(arg)
    return options, found


def option_values(args: list[str], short: frozenset[str], long: frozenset[str]) -> list[str]:
    """Values given to the named options: `-o X`, `-oX`, `--output X`, `--output=X`."""
    values: list[str] = []
    for k, arg in enumerate(args):
        following = args[k + 1] if k + 1 < len(args) else ""
        if arg in short or arg in long:
            values.append(following)
        elif any(arg.startswith(opt + "=") for opt in long):
            values.append(arg.split("=", 1)[1])
        elif not arg.startswith("--") and any(
            arg.startswith(opt) and len(arg) > len(opt) for opt in short
        ):
            values.append(arg[2:])
    return values


def skip_options(args: list[str], with_value: frozenset[str] = frozenset()) -> list[str]:
    """args after the leading options (and their values) of a wrapper like nice or timeout."""
    k = 0
    while k < len(args) and args[k].startswith("-") and args[k] != "-":
        if args[k] == "--":
            return args[k + 1 :]
        k += 2 if args[k] in with_value else 1
    return args[k:]
