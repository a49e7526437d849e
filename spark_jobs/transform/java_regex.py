"""Java regexes and replacements as Kafka Connect's RegexRouter and TopicNameMatches read them,
evaluated with Python's ``re``: topic names, of which a window has few distinct values.

:func:`translate` writes a ``java.util.regex.Pattern`` regex in Python's syntax (the groups keep
their numbers): ``(?<name>…)`` is ``(?P<name>…)`` (which cdcflow reads too), ``\\k<name>``
``(?P=name)``, ``\\Q…\\E`` quoted text, a flag mid-pattern (``a(?i)b``) holds to the end of its
group, as Java's; classes are Java's: nested (``[a-c[x-z]]`` a union), ``&&`` an intersection
(``[a-z&&[^aeiou]]``, read as a lookahead), ``[:alpha:]`` the characters ``:alph``; ``\\p{Alpha}``
and the other POSIX classes, ``\\h``, ``\\v``, ``\\R``, ``\\z``, ``\\Z``, ``\\G``, octal, hex and
control escapes; lookarounds, backreferences, atomic groups and possessive quantifiers as they are.
``\\w``, ``\\d``, ``\\s``, ``\\b`` and ``(?i)`` are ASCII's unless ``(?u)``/``(?U)``, as Java's.

A ValueError says why a regex is refused: what Java refuses (Kafka Connect refuses the config), and
the few forms cdcflow does not read (a Unicode class ``\\p{L}``, a negated class over a nested class
or an intersection, a lookbehind of varying width). :func:`replacement` reads a replacement as
``Matcher.appendReplacement`` does, and refuses what it throws on (a group the regex lacks, a ``$``
without a group, a trailing ``\\``). :func:`routed` is RegexRouter's ``matches()`` then
``replaceFirst``.
"""

from __future__ import annotations

import re
import unicodedata
from functools import lru_cache

_REFUSED = "Kafka Connect refuses the regex"
_POSIX = {"Lower": "a-z", "Upper": "A-Z", "ASCII": r"\x00-\x7f", "Alpha": "a-zA-Z", "Digit": "0-9",
          "Alnum": "a-zA-Z0-9", "Punct": re.escape("!\"#$%&'()*+,-./:;<=>?@[\\]^_`{|}~"),
          "Graph": r"\x21-\x7e", "Print": r"\x20-\x7e", "Blank": r" \t", "Cntrl": r"\x00-\x1f\x7f",
          "XDigit": "0-9a-fA-F", "Space": r" \t\n\x0b\f\r"}
_SETS = {"h": r" \t\xa0\u1680\u180e\u2000-\u200a\u202f\u205f\u3000", "v": r"\n\x0b\f\r\x85\u2028\u2029"}
_ANCHORS = {"A": r"\A", "z": r"\Z", "Z": r"(?=\n?\Z)", "G": r"\A", "b": r"\b", "B": r"\B",  # \G: the first match's
            "R": r"(?:\r\n|[\n\x0b\f\r\x85\u2028\u2029])"}
_FLAGS = {"i": "i", "m": "m", "s": "s", "u": "u", "U": "u", "d": "", "x": ""}  # d: no line terminator in a topic
Piece = tuple[str, str]  # ("lit", text), ("set", class body), ("neg", class body) or ("expr", a regex)


@lru_cache(maxsize=256)
def compiled(java: str) -> re.Pattern[str]:
    """The Java regex as a Python regex; ValueError saying why it is refused."""
    try:
        return re.compile(translate(java), re.ASCII)
    except re.error as exc:
        raise ValueError(f"Python's re, which reads Java regexes for cdcflow, refuses it: {exc}") from None


def translate(java: str) -> str:
    return _Translator(java).run()


class _Translator:
    def __init__(self, java: str) -> None:
        self.s, self.i, self.groups = java, 0, 0
        self.levels: list[list[str]] = [[]]  # per open group: the flag groups a (?i) opened in it
        self.comments = [False]  # per open group: Java's COMMENTS flag (x)

    def run(self) -> str:
        out: list[str] = []
        s = self.s
        while self.i < len(s):
            c = s[self.i]
            if self.comments[-1] and (c.isspace() or c == "#"):
                end = s.find("\n", self.i) if c == "#" else self.i
                self.i = len(s) if end < 0 else end + 1
            elif c == "\\":
                out.append(_standalone(self.escape(False)))
            elif c == "[":
                out.append(self.char_class())
            elif c == "(":
                out.append(self.group())
            elif c == ")":
                if len(self.levels) == 1:
                    raise ValueError(f"the ) at {self.i} closes no group: {_REFUSED}")
                out.append(")" * len(self.levels.pop()) + ")")
                self.comments.pop()
                self.i += 1
            elif c == "|":
                flags = self.levels[-1]
                out.append(")" * len(flags) + "|" + "".join(flags))
                self.i += 1
            elif c == "{":
                found = re.match(r"\{\d+(,\d*)?\}", s[self.i:])
                if not found:
                    raise ValueError(f"the {{ at {self.i} is not a repetition ({{n}}, {{n,}}, {{n,m}}): {_REFUSED} "
                                     "(write \\{ for the character)")
                out.append(found.group())
                self.i += found.end()
            else:
                out.append(c)
                self.i += 1
        if len(self.levels) > 1:
            raise ValueError(f"a group is not closed: {_REFUSED}")
        return "".join(out) + ")" * len(self.levels[0])

    def group(self) -> str:
        rest = self.s[self.i:]
        named = re.match(r"\(\?<([a-zA-Z][a-zA-Z0-9]*)>|\(\?P<([a-zA-Z_]\w*)>", rest)  # Java's, Python's
        plain = next((p for p in ("(?<=", "(?<!", "(?=", "(?!", "(?:", "(?>") if rest.startswith(p)), None)
        flags = re.match(r"\(\?([idmsuxU]*)(?:-([idmsuxU]*))?([:)])", rest)
        if named:
            self.groups += 1
            return self._open(named.end(), f"(?P<{named.group(1) or named.group(2)}>", self.comments[-1])
        if plain:
            return self._open(len(plain), plain, self.comments[-1])
        if re.match(r"\(\?P=\w+\)", rest):  # Python's backreference, as cdcflow reads (?P<name>…) too
            end = rest.index(")") + 1
            self.i += end
            return rest[:end]
        if flags:
            on, off, kind = flags.group(1), flags.group(2) or "", flags.group(3)
            comments = (self.comments[-1] or "x" in on) and "x" not in off
            py_on, py_off = "".join(_FLAGS[f] for f in on), "".join(_FLAGS[f] for f in off)
            if "u" in py_off:
                raise ValueError("(?-u) is not read by cdcflow (Python's re cannot turn Unicode matching off in part "
                                 "of a regex): leave it out")
            opened = f"(?{py_on}-{py_off}:" if py_off else f"(?{py_on}:"
            if kind == ":":
                return self._open(flags.end(), opened, comments)
            self.i += flags.end()
            self.comments[-1] = comments
            if opened == "(?:":
                return ""
            self.levels[-1].append(opened)  # to the end of the enclosing group, as Java's
            return opened
        if rest.startswith("(?"):
            raise ValueError(f"{rest[:3]!r} at {self.i} is not a Java group: {_REFUSED}")
        self.groups += 1
        return self._open(1, "(", self.comments[-1])

    def _open(self, width: int, text: str, comments: bool) -> str:
        self.i += width
        self.levels.append([])
        self.comments.append(comments)
        return text

    def escape(self, in_class: bool) -> Piece:
        """The escape at ``self.i`` (a backslash)."""
        s, i = self.s, self.i
        if i + 1 == len(s):
            raise ValueError(f"the regex ends in a \\: {_REFUSED} (write \\\\ for a backslash)")
        c = s[i + 1]
        self.i = i + 2
        if c == "Q":  # quoted to \E (or the end)
            end = s.find("\\E", i + 2)
            self.i = len(s) if end < 0 else end + 2
            return "lit", s[i + 2:len(s) if end < 0 else end]
        if c == "0":
            octal = re.match(r"[0-3][0-7]{2}|[0-7]{1,2}", s[i + 2:])
            if not octal:
                raise ValueError(f"\\0 at {i} is not followed by an octal number: {_REFUSED}")
            self.i += octal.end()
            return "lit", chr(int(octal.group(), 8))
        if c.isdigit():
            if in_class:
                raise ValueError(f"\\{c} at {i}: a backreference in a class: {_REFUSED}")
            ref = int(c)
            while self.i < len(s) and s[self.i].isdigit() and ref * 10 + int(s[self.i]) <= self.groups:
                ref, self.i = ref * 10 + int(s[self.i]), self.i + 1
            return "expr", f"(?:\\{ref})" if ref <= self.groups else "(?!)"  # a group not yet seen matched nothing
        if c == "k":
            name = re.match(r"<([a-zA-Z][a-zA-Z0-9]*)>", s[self.i:])
            if not name or in_class:
                raise ValueError(f"\\k at {i} is not a backreference \\k<name>: {_REFUSED}")
            self.i += name.end()
            return "expr", f"(?P={name.group(1)})"
        if c in "dDsSwW":
            return "set", "\\" + c
        if c in "hv":
            return "set", _SETS[c]
        if c in "HV":
            return "neg", _SETS[c.lower()]
        if c in "pP":
            return self._property(c, i)
        if c in "tnrfa":
            return "lit", {"t": "\t", "n": "\n", "r": "\r", "f": "\f", "a": "\a"}[c]
        if c == "e":
            return "lit", "\x1b"
        if c == "c" and self.i < len(s):
            self.i += 1
            return "lit", chr(ord(s[self.i - 1]) ^ 64)
        if c in "xuN":
            form = {"x": r"\{([0-9a-fA-F]+)\}|([0-9a-fA-F]{2})", "u": r"()([0-9a-fA-F]{4})", "N": r"\{([^}]+)\}"}[c]
            found = re.match(form, s[self.i:])
            if not found:
                raise ValueError(f"\\{c} at {i} is not a Java escape: {_REFUSED}")
            self.i += found.end()
            if c == "N":
                return "lit", unicodedata.lookup(found.group(1))
            return "lit", chr(int(found.group(1) or found.group(2), 16))
        if c in _ANCHORS and not in_class:
            return "expr", _ANCHORS[c]
        if c.isascii() and c.isalpha():
            raise ValueError(f"\\{c} at {i} is not a Java escape: {_REFUSED}")
        return "lit", c

    def _property(self, c: str, at: int) -> Piece:
        found = re.match(r"\{(\w+)\}|(\w)", self.s[self.i:])
        name = (found.group(1) or found.group(2)) if found else ""
        body = _POSIX.get(name)
        if body is None:
            raise ValueError(f"\\{c}{{{name}}} at {at}: cdcflow reads the POSIX classes \\p{{Alpha}}, \\p{{Digit}} … "
                             f"({', '.join(_POSIX)}), not Unicode's (Kafka Connect does): write the characters out "
                             "([a-zA-Z])")
        self.i += found.end() if found else 0
        return ("neg" if c == "P" else "set"), body

    def char_class(self) -> str:
        """The class at ``self.i`` (Java's: nested classes, &&) as a Python regex of one character."""
        s, start = self.s, self.i
        self.i += 1
        negated = s.startswith("^", self.i)
        self.i += negated
        operands: list[list[Piece]] = [[]]
        first = True
        while True:
            if self.i >= len(s):
                raise ValueError(f"the class at {start} is not closed: {_REFUSED}")
            c = s[self.i]
            if c == "]" and not first:
                self.i += 1
                break
            first = False
            if self.comments[-1] and c.isspace():
                self.i += 1
            elif c == "[":
                operands[-1].append(("expr", self.char_class()))
            elif s.startswith("&&", self.i):
                operands.append([])
                self.i += 2
            else:
                piece = self.escape(True) if c == "\\" else ("lit", c)
                if c != "\\":
                    self.i += 1
                operands[-1].append(self._range(piece) if piece[0] == "lit" else piece)
        parts = [_union(items) for items in operands if items]  # an empty operand ([a&&]) is left out, as Java's
        if not negated:
            return parts[0] if len(parts) == 1 else "(?:" + "".join(f"(?={p})" for p in parts[1:]) + parts[0] + ")"
        if len(operands) == 1 and all(kind in ("lit", "set") for kind, _ in operands[0]):
            return "[^" + "".join(_in_class(p) for p in operands[0]) + "]"
        raise ValueError(f"the class at {start} negates a nested class or an intersection ([^…[…]], [^…&&…]), which "
                         "cdcflow does not read (Java 8 and later Javas read it differently): negate inside it "
                         "([a-z&&[^aeiou]])")

    def _range(self, low: Piece) -> Piece:
        """A literal, or the range it starts (``a-z``)."""
        s = self.s
        if len(low[1]) != 1 or not s.startswith("-", self.i) or self.i + 1 >= len(s) or s[self.i + 1] in "][":
            return low
        self.i += 1
        high = self.escape(True) if s[self.i] == "\\" else ("lit", s[self.i])
        if s[self.i] != "\\":
            self.i += 1
        if high[0] != "lit" or len(high[1]) != 1 or high[1] < low[1]:
            raise ValueError(f"the range {low[1]}-{high[1]} before {self.i} is not a range: {_REFUSED}")
        return "set", re.escape(low[1]) + "-" + re.escape(high[1])


def _in_class(piece: Piece) -> str:
    kind, text = piece
    return "".join(re.escape(ch) for ch in text) if kind == "lit" else text


def _union(items: list[Piece]) -> str:
    """Items of a class as one Python regex of one character."""
    inside = "".join(_in_class(p) for p in items if p[0] in ("lit", "set"))
    parts = ([f"[{inside}]"] if inside else []) + [f"[^{t}]" if k == "neg" else t for k, t in items
                                                  if k in ("neg", "expr")]
    return parts[0] if len(parts) == 1 else "(?:" + "|".join(parts) + ")"


def _standalone(piece: Piece) -> str:
    kind, text = piece
    return {"lit": re.escape(text), "set": f"[{text}]", "neg": f"[^{text}]"}.get(kind, text)


@lru_cache(maxsize=256)
def replacement(java: str, regex: str) -> tuple[str | int, ...]:
    """The replacement as text pieces and group numbers (0 the whole match), as Java's
    ``Matcher.appendReplacement`` reads it: ``$n`` takes the most digits that still name a group
    (``$10`` is group 10 of a regex of ten or more, else group 1 and a 0), ``${name}`` a named group,
    ``\\x`` the character x. ValueError saying what Java throws on."""
    pattern = compiled(regex)
    pieces: list[str | int] = []
    text: list[str] = []
    i = 0
    while i < len(java):
        c = java[i]
        if c == "\\":
            if i + 1 == len(java):
                raise ValueError("it ends in a \\, which escapes nothing (write \\\\ for a backslash)")
            text.append(java[i + 1])
            i += 2
            continue
        if c != "$":
            text.append(c)
            i += 1
            continue
        named = re.match(r"\{([A-Za-z0-9]*)\}", java[i + 1:])
        if named:
            if named.group(1) not in pattern.groupindex:
                raise ValueError(f"${{{named.group(1)}}} names a group the regex lacks (its named groups: "
                                 f"{', '.join(pattern.groupindex) or 'none'})")
            group = pattern.groupindex[named.group(1)]
            i += 1 + named.end()
        else:
            if i + 1 == len(java) or not java[i + 1].isdigit():
                raise ValueError(f"the $ at {i} is not followed by a group number or {{name}} (write \\$ for a "
                                 "dollar sign)")
            group, i = int(java[i + 1]), i + 2
            while i < len(java) and java[i].isdigit() and group * 10 + int(java[i]) <= pattern.groups:
                group, i = group * 10 + int(java[i]), i + 1
            if group > pattern.groups:
                raise ValueError(f"${group} names group {group}, but the regex has {pattern.groups} group"
                                 f"{'s' * (pattern.groups != 1)}")
        pieces += ["".join(text), group]
        text = []
    return tuple(p for p in [*pieces, "".join(text)] if p != "")


def matches(regex: str, topic: str) -> bool:
    """TopicNameMatches: the regex matches the whole topic (Matcher.matches)."""
    return compiled(regex).fullmatch(topic) is not None


def routed(regex: str, java_replacement: str, topic: str) -> str | None:
    """RegexRouter's topic: where the regex matches the whole topic (None: it does not), Java's
    ``replaceFirst``: the first match found (which may be shorter: ``a|ab`` on ``ab`` finds ``a``)
    replaced."""
    pattern = compiled(regex)
    if pattern.fullmatch(topic) is None:
        return None
    found = pattern.search(topic)
    assert found is not None
    text = "".join(p if isinstance(p, str) else found.group(p) or "" for p in replacement(java_replacement, regex))
    return topic[:found.start()] + text + topic[found.end():]
