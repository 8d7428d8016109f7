#!/usr/bin/env python3
"""Labels the regex cases of tests/test_regex_grammar.c with Python's own re.fullmatch (re.ASCII:
the converter gives \\d \\w \\s their ASCII meaning) and prints them as the C tables that test
holds; paste the output over the tables there after changing a case here.

A regex is given as (the converter's spelling, Python's spelling or None when the same): Python has
no (?<name>...) group, ECMAScript's spelling. In json_string cases the test text is the JSON text
of the content (what a JSON writer puts between the quotes) and the label is about the content."""
import json
import re

PLAIN = [
    (r"^\d{3}-\d{3}-\d{4}$", None, ["555-123-4567", "555-1234-567", "5551234567", "555-123-456", "555-123-45678",
                                    "abc-def-ghij", "", "555-123-4567\n", " 555-123-4567", "000-000-0000"]),
    (r"\(\d{3}\) \d{3}-\d{4}", None, ["(555) 123-4567", "555 123-4567", "(555)123-4567", "(55) 123-4567",
                                      "(555) 123-45678", "(555) 123-456a", "(000) 000-0000", "(555) 123 4567", "(555)  123-4567", ""]),
    (r"\+?1?[ -]?\d{3}[ .-]?\d{4}", None, ["+1 555 1234", "1-5551234", "5551234", "+555.1234", "++1 555 1234",
                                          "1 555  1234", "+1-555-1234", "555-123", "1 5551234", "+15551234", "-555-1234", "+1 555 12345"]),
    (r"\d{4}-(0[1-9]|1[0-2])-(0[1-9]|[12]\d|3[01])", None, ["2024-01-31", "2024-12-01", "2024-13-01", "2024-00-10",
                                                          "2024-02-30", "2024-02-32", "24-02-10", "2024-2-10",
                                                          "2024-10-20x", "1999-09-09", "2024-01-3"]),
    (r"[a-zA-Z0-9._%+-]+@[a-zA-Z0-9.-]+\.[a-zA-Z]{2,}", None, ["john.doe@example.com", "a+b@x.io", "a@b.c",
                                                             "@example.com", "john@example", "john@@example.com",
                                                             "jo hn@example.com", "x%y@sub.domain.org",
                                                             "x@y.c0m"]),
    (r"(cat|dog|bird)s?", None, ["cat", "cats", "dogs", "bird", "birdss", "catdog", "", "s", "Cat", "dogss", "birds"]),
    (r"((a|b)c)+d", None, ["acd", "bcacd", "acbcacd", "d", "abd", "acbd", "acacac", "bcbcbcd", "ccd", "acd ", "bd"]),
    (r"(?:ab|cd){2,3}", None, ["abab", "abcd", "cdabcd", "ab", "abcdabcd", "abc", "cdcdcd", ""]),
    (r"x{2}y{0,3}z{1,}", None, ["xxz", "xxyyyzzz", "xz", "xxyyyyz", "xxy", "xxzzzzzzzz", "xxxz"]),
    (r"[\w.-]+", None, ["hello_world.txt", "a-b", "", "a b", "a/b", "Z9_", "é", "...", "-_-", "tab\t", "CamelCase42"]),
    (r"[^\s\"\\]+", None, ["abc", "a\"c", "a\\c", "a c", "a\tc", "ümlaut", "", "x\n", "日本語", "a'b", "\x7f"]),
    (r"\s*\S+\s*", None, ["  word  ", "word", "\tw\n", "two words", "", "   ", "\x0bx\x0c"]),
    (r"[\[\]\-^]+", None, ["[]", "-^", "[-]^", "a", "", "\\", "]]]]", "^", "-a"]),
    (r"café|naïve|日本語", None, ["café", "naïve", "日本語", "cafe", "naive", "日本", "café日本語", "Café", "naïve ", "日本語語"]),
    (r"[α-ω]+\u00e9?", None, ["αβγ", "ωé", "é", "αβγe", "Α", "λλλλλ", "αé", "ωéé", "", "aβ"]),
    (r"(a?b?)*c", None, ["c", "abc", "bac", "aabbabc", "", "ab", "cc", "bbbbc"]),
    (r"(a*|b)+", None, ["", "a", "b", "aabba", "c", "abab", "bbbb", "aaaaaaaa", " a"]),
    (r".{3}", None, ["abc", "a\nb", "a\"b", "ab", "abcd", "日本語", "\t\t\t", "\n\n\n", "\r\r\r", "😀😀😀", "ab\n"]),
    (r"(?<year>\d{4})/(?P<mon>\d{2})", r"(?P<year>\d{4})/(?P<mon>\d{2})", ["2024/05", "2024/5", "24/05", "2024-05", "2024/123", "abcd/ef", "0000/00", "2024/05/"]),
    (r"\x41\t\/\.\\", None, ["A\t/.\\", "A /.\\", "A\t/x\\", "a\t/.\\", "A\t/.", "A\t\\/.\\", "A\t/.\\\\"]),
    (r"(yes|no|maybe)( (yes|no))*", None, ["yes", "maybe no yes", "no no no", "yes maybe", "yes ", "", "nono", "maybe maybe", "no yes no yes", "maybe  no"]),
    (r"-?(0|[1-9]\d*)(\.\d+)?([eE][+-]?\d+)?", None, ["0", "-12.5e+3", "012", "1.", ".5", "3E7", "-0", "1e", "42"]),
    (r"[A-Z][a-z]*( [A-Z][a-z]*)*", None, ["John Smith", "John smith", "A B C", "John  Smith", "", "Ann Lee ", "X", "ÉMILE", "McDonald Old"]),
    (r"a{,2}b{2,}?", None, ["bb", "abbb", "aabb", "aaabb", "ab", "abb", "", "b", "aabbbbbb", "ba"]),
    (r"(ab|a)(bc|c)", None, ["abc", "abbc", "ac", "abcc", "bc", "abbcc", "a", "c"]),
    (r"\d+(,\d{3})*", None, ["1", "1,000", "12,345,678", "1,00", "1,0000", ",000", "1,000,", "1000", "123,456", "", "1,a00"]),
    (r"", None, ["", "a", " ", "\n"]),
    (r"a|^b$|c$", None, ["a", "b", "c", "", "ab", "bc", "aa", " c"]),
    (r"[^abc]\D\W", None, ["x1!", "a1!", "xx!", "x!!", "xxa", "\n. ", "日x ", "x_!", "x1a", "\n\n\n", "b2@"]),
    (r"\w+?\d*?", r"\w+?\d*?", ["abc123", "a", "123", "", "a-1", "_", "9"]),
]

JSON_STRING = [
    (r"a.b", None, ["a\"b", "a\\b", "a\tb", "a\x01b", "a\x1fb", "ab", "a\nb", "aéb"]),
    (r'"[^"]*"', None, ["\"hi\"", "\"\"", "\"a\"b\"", "hi", "\"new\nline\""]),
    (r"[\n\t]+x", None, ["\n\tx", "x", "\n\n\nx", " x", "\rx"]),
    (r"\w+\s\w+", None, ["ab\ncd", "ab cd", "ab\tcd", "ab\"cd", "abcd"]),
    (r".*", None, ["", "quote\" and backslash\\", "new\nline", "\x00", "\x7f", "日本"]),
    (r"[^a]+", None, ["\"", "\\", "\x1f", "\n", "bcd", "a", "\b\f"]),
    (r"\\d+", None, ["\\d", "\\ddd", "d", "\\\\d"]),
]


def c_string(text):
    """A C string literal for text's UTF-8 bytes: printable ASCII as itself, the rest as octal."""
    out = ['"']
    for byte in text.encode("utf-8"):
        ch = chr(byte)
        if ch in '"\\':
            out.append("\\" + ch)
        elif ch == "?" and out[-1].endswith("?"):  # no ?? that would read as a trigraph
            out.append("\\?")
        elif 0x20 <= byte < 0x7F:
            out.append(ch)
        else:
            out.append("\\%03o" % byte)
    out.append('"')
    return "".join(out)


def table(name, cases, json_string):
    print("static const regex_case %s[] = {" % name)
    for regex, python_regex, texts in cases:
        assert len(texts) <= 16, regex  # MAX_TEXTS in the test
        compiled = re.compile(python_regex if python_regex is not None else regex, re.ASCII)
        lines, line = [], "    {%s, {" % c_string(regex)
        for content in texts:
            shown = json.dumps(content, ensure_ascii=False)[1:-1] if json_string else content
            item = "{%s, %s}, " % (c_string(shown), "true" if compiled.fullmatch(content) else "false")
            if len(line) + len(item) > 112:
                lines.append(line.rstrip())
                line = "        "
            line += item
        lines.append(line.rstrip().rstrip(",") + "}},")
        print("\n".join(lines))
    print("};")


if __name__ == "__main__":
    table("k_plain_cases", PLAIN, False)
    print()
    table("k_json_string_cases", JSON_STRING, True)
