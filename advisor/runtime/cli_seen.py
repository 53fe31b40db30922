"""The script's own command line as its parsers read it, inside the script's process: every
argparse option (``add_argument``'s place in the code, its destination, its default, its
action) and whether this run's arguments gave it. A value followed back from a call
(advisor.runtime.provenance) that reads ``args.numworkers`` ends at the option ``--numworkers``,
given as ``--numworkers 1`` or left at its default; the patch then changes the command line
(advisor.patch.provenance). ``HfArgumentParser`` is an ``ArgumentParser``: its dataclass fields
are options here too.

Nothing of the script's runs twice: the parse is not repeated; which options the arguments
gave is read from the argument words, as argparse matches them (``--opt v``, ``--opt=v``,
``-jN``, a unique prefix of a long option).
"""

from __future__ import annotations

import argparse
import functools
import sys
import weakref
from dataclasses import asdict, dataclass, field

_MAX_PARSERS = 16


@dataclass
class Option:
    """One argparse option as this run saw it."""
    dest: str
    options: list[str]                # its option strings ("--numworkers", "-j")
    action: str                       # "store", "store_true", "store_false", "BooleanOptionalAction", ...
    default: object = None            # plain values only (repr for others)
    type: str | None = None           # the type's name ("int", "str2bool")
    choices: list | None = None
    where: str | None = None          # add_argument's place, "path:LINE"
    given: bool = False               # this run's arguments gave it
    flag: str | None = None           # the word that gave it ("--numworkers", or a prefix of it)
    value: str | None = None          # the value word the arguments gave it
    parser: str = "argparse"
    from_argv: bool = True            # parsed from the command line (not a list the script made)

    def as_dict(self) -> dict:
        return asdict(self)

    @property
    def switch(self) -> bool:
        """A flag that takes no value (store_true / store_false / store_const)."""
        return self.action in ("store_true", "store_false", "store_const")


def _plain(value):
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    if isinstance(value, (list, tuple)) and all(isinstance(v, (bool, int, float, str)) for v in value):
        return list(value)
    return repr(value)[:80]


def _action_name(action) -> str:
    name = type(action).__name__
    known = {"_StoreAction": "store", "_StoreTrueAction": "store_true", "_StoreFalseAction": "store_false",
             "_StoreConstAction": "store_const", "_AppendAction": "append", "_CountAction": "count",
             "_AppendConstAction": "append_const", "_ExtendAction": "extend"}
    return known.get(name, name)


def _given(parser, action, words: list[str]) -> tuple[str, str | None] | None:
    """(the word that gave ``action``, its value word) in ``words``, matched as argparse matches
    option words; None when the words do not give it."""
    takes = action.nargs != 0      # store_true and its kind take no value word
    for i, tok in enumerate(words):
        if tok == "--":
            break
        if len(tok) < 2 or tok[0] not in parser.prefix_chars:
            continue
        name, eq, val = tok.partition("=")
        nxt = words[i + 1] if i + 1 < len(words) else None
        if name in action.option_strings:
            return name, (val if eq else (nxt if takes else None))
        for o in action.option_strings:   # -j4: a short option with its value attached
            if takes and len(o) == 2 and o[1] not in parser.prefix_chars and tok.startswith(o) and len(tok) > 2:
                return o, tok[2:]
        if getattr(parser, "allow_abbrev", True) and tok[1] in parser.prefix_chars and \
                name not in parser._option_string_actions:   # --numw 1: a unique prefix
            hits = {id(a): a for opt, a in parser._option_string_actions.items() if opt.startswith(name)}
            if len(hits) == 1 and next(iter(hits.values())) is action:
                return name, (val if eq else (nxt if takes else None))
    return None


@dataclass
class ParserSeen:
    options: dict[str, Option] = field(default_factory=dict)   # dest → its option


class CliSeen:
    """The options of each parser the script ran, by the namespace it returned."""

    def __init__(self, sites=None):
        self.sites = sites
        self._where: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()   # action → add_argument's place
        self._by_namespace: dict[int, tuple[weakref.ref, ParserSeen]] = {}
        self.parsers: list[ParserSeen] = []

    # ------------------------------------------------------------------ hooks
    def install(self, patches) -> None:
        seen = self
        orig_add = argparse._ActionsContainer.add_argument
        orig_parse = argparse.ArgumentParser.parse_known_args

        @functools.wraps(orig_add)
        def add_argument(container, *a, **k):
            action = orig_add(container, *a, **k)
            try:
                where = seen.sites.site(3) if seen.sites is not None else None
                if where is not None:
                    seen._where[action] = where
            except Exception:  # noqa: BLE001 - an observation never breaks the script
                pass
            return action

        @functools.wraps(orig_parse)
        def parse_known_args(parser, args=None, namespace=None):
            out = orig_parse(parser, args, namespace)
            try:
                words = sys.argv[1:] if args is None else list(args)
                seen._record(parser, words, out[0], from_argv=args is None or words == sys.argv[1:])
            except Exception:  # noqa: BLE001
                pass
            return out

        patches.set(argparse._ActionsContainer, "add_argument", add_argument)
        patches.set(argparse.ArgumentParser, "parse_known_args", parse_known_args)

    def _record(self, parser, words: list[str], namespace, from_argv: bool = True) -> None:
        if len(self.parsers) >= _MAX_PARSERS or not all(isinstance(w, str) for w in words):
            return
        if id(namespace) in self._by_namespace:     # a subparser's parse inside its parent's:
            prior = self._by_namespace[id(namespace)][1]   # the same namespace, more options
        else:
            prior = ParserSeen()
            self.parsers.append(prior)
        for action in parser._actions:
            if not action.option_strings or action.dest in (argparse.SUPPRESS, "help") or action.dest in prior.options:
                continue
            hit = _given(parser, action, words)
            prior.options[action.dest] = Option(
                dest=action.dest, options=list(action.option_strings), action=_action_name(action),
                default=_plain(action.default), type=getattr(action.type, "__name__", None),
                choices=[_plain(c) for c in action.choices] if action.choices else None,
                where=self._where.get(action), given=hit is not None,
                flag=hit[0] if hit else None, value=hit[1] if hit else None,
                parser=type(parser).__name__, from_argv=from_argv)
        try:
            ref = weakref.ref(namespace)
        except TypeError:
            ref = lambda ns=namespace: ns   # noqa: E731 - a namespace that takes no weak reference
        self._by_namespace[id(namespace)] = (ref, prior)

    # ------------------------------------------------------------------ queries
    def of_namespace(self, namespace, dest: str) -> Option | None:
        """The option behind ``namespace.dest`` when a parser of this run made ``namespace``."""
        got = self._by_namespace.get(id(namespace))
        if got is None or got[0]() is not namespace:
            return None
        return got[1].options.get(dest)

    def matching(self, dest: str, value) -> Option | None:
        """The one option of this run whose destination is ``dest`` and whose value (given, or
        its default) is ``value``: a value copied out of the namespace (``vars(args)``, a
        dataclass ``HfArgumentParser`` filled, ``Config(**vars(args))``) still comes from it."""
        hits = []
        for p in self.parsers:
            o = p.options.get(dest)
            if o is not None and _same(o, value):
                hits.append(o)
        return hits[0] if len(hits) == 1 else None

    def by_dest(self, dest: str) -> Option | None:
        """The one option of this run whose destination is ``dest``."""
        hits = [p.options[dest] for p in self.parsers if dest in p.options]
        return hits[0] if len(hits) == 1 else None

    def all_options(self) -> list[dict]:
        return [o.as_dict() for p in self.parsers for o in p.options.values()]


def _same(o: Option, value) -> bool:
    if o.given and o.value is not None:
        return str(value) == o.value or (isinstance(value, bool) and str(value).lower() == o.value.lower())
    if o.given and o.switch:
        return isinstance(value, bool)
    return value == o.default or (value is not None and repr(value)[:80] == o.default)
