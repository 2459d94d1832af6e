"""``ssl.principal.mapping.rules``: a client certificate's subject -> the principal's user name
(Kafka's ``SslPrincipalMapper``).

The subject is taken as an RFC 4514/2253 string, most specific first (``CN=alice,OU=eng,
O=loglake``), as Java's ``X500Principal.getName()`` prints it. Rules, comma-separated, first
match wins:

* ``DEFAULT``: the whole distinguished name;
* ``RULE:pattern/replacement/`` optionally followed by ``L`` (lower case) or ``U`` (upper
  case): when the *whole* name matches the regular expression ``pattern``, the name with every
  match replaced by ``replacement`` (``$1`` for group 1, as in Java); ``/`` and ``\\`` inside
  pattern or replacement are escaped with ``\\``.

No rule matching is an authentication failure (:class:`NoMatchingRuleError`): the connection
is closed, as Kafka does. Immutable after parsing; safe from any thread.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from loglake.errors import InvalidConfigError

_RULE_PATTERN = r"(DEFAULT)|RULE:((?:\\.|[^\\/])*)/((?:\\.|[^\\/])*)/([LU]?).*?|(.*?)"
_RULE_SPLITTER = re.compile(r"\s*(" + _RULE_PATTERN + r")\s*(?:,\s*|$)")


class NoMatchingRuleError(Exception):
    """No mapping rule applies to a certificate's distinguished name."""


@dataclass(frozen=True)
class MappingRule:
    default: bool
    pattern: re.Pattern[str] | None = None
    replacement: str = ""
    case: str = ""  # "", "L" or "U"

    def apply(self, name: str) -> str | None:
        if self.default:
            return name
        assert self.pattern is not None
        if self.pattern.fullmatch(name) is None:
            return None
        result = self.pattern.sub(self.replacement, name)
        if self.case == "L":
            return result.lower()
        if self.case == "U":
            return result.upper()
        return result


def _python_replacement(java: str) -> str:
    """Java's replacement syntax (``$1``, ``\\$``) in Python's (``\\g<1>``)."""
    out: list[str] = []
    i = 0
    while i < len(java):
        char = java[i]
        if char == "\\" and i + 1 < len(java):
            out.append(java[i + 1].replace("\\", "\\\\"))
            i += 2
            continue
        if char == "$" and i + 1 < len(java) and java[i + 1].isdigit():
            j = i + 1
            while j < len(java) and java[j].isdigit():
                j += 1
            out.append(f"\\g<{java[i + 1:j]}>")
            i = j
            continue
        out.append("\\\\" if char == "\\" else char)
        i += 1
    return "".join(out)


def _unescape(text: str) -> str:
    return re.sub(r"\\([\\/])", r"\1", text)


@dataclass(frozen=True)
class PrincipalMapper:
    """Parsed ``ssl.principal.mapping.rules`` (see the module docstring)."""

    rules: tuple[MappingRule, ...]
    text: str = "DEFAULT"

    @classmethod
    def parse(cls, text: str) -> PrincipalMapper:
        """Parse the rules; raises InvalidConfigError naming a malformed rule."""
        rules: list[MappingRule] = []
        position = 0
        stripped = text.strip()
        while position < len(stripped):
            match = _RULE_SPLITTER.match(stripped, position)
            if match is None or match.end() == position:
                raise InvalidConfigError(
                    f"ssl.principal.mapping.rules: cannot parse {stripped[position:]!r}")
            position = match.end()
            if match.group(2):
                rules.append(MappingRule(True))
            elif match.group(3) is not None and stripped[match.start(1):].startswith("RULE:"):
                pattern = _unescape(match.group(3))
                try:
                    compiled = re.compile(pattern)
                except re.error as exc:
                    raise InvalidConfigError(
                        f"ssl.principal.mapping.rules: bad pattern {pattern!r}: {exc}") from None
                rules.append(MappingRule(False, compiled,
                                         _python_replacement(_unescape(match.group(4))),
                                         match.group(5) or ""))
            elif match.group(6):
                raise InvalidConfigError(
                    f"ssl.principal.mapping.rules: invalid rule {match.group(6)!r}: expected "
                    "DEFAULT or RULE:pattern/replacement/[LU]")
        if not rules:
            rules.append(MappingRule(True))
        return cls(tuple(rules), text)

    def name(self, distinguished_name: str) -> str:
        """The user name of a certificate subject; raises NoMatchingRuleError."""
        for rule in self.rules:
            result = rule.apply(distinguished_name)
            if result is not None:
                return result
        raise NoMatchingRuleError(
            f"No rules apply to {distinguished_name}, rules {self.text}")
