"""caseops_ref.py — the 1.0611 record's CaseOps text transform (lossless_caps_caseops_v1), written
for the tests from the record's description, independently of ctrain's caseops.c, so that the
tests that check ctrain's (test_caseops.sh, test_tokenize.sh) have something to check it against.
Over maximal runs of ASCII letters: a lower-case word stays; a word of two or more letters, all
capitals, becomes ALLCAPS + the word in lower case; any other word with a capital becomes TITLE
when its first letter is one, then its letters in lower case, CAPNEXT before each later capital;
an operator character of the text gets ESC before it."""
import re

TITLE, ALLCAPS, CAPNEXT, ESC = '\ue001', '\ue002', '\ue003', '\ue004'
OPERATORS = (TITLE, ALLCAPS, CAPNEXT, ESC)


def encode(text):
    out = []
    for m in re.finditer(r'[A-Za-z]+|[^A-Za-z]', text):
        w = m.group(0)
        if not w.isalpha() or not w.isascii():
            out.append(ESC + w if w in OPERATORS else w)
        elif w.islower():
            out.append(w)
        elif len(w) >= 2 and w.isupper():
            out.append(ALLCAPS + w.lower())
        else:
            out.append((TITLE if w[0].isupper() else '') + w[0].lower() +
                       ''.join((CAPNEXT if c.isupper() else '') + c.lower() for c in w[1:]))
    return ''.join(out)
