"""The large-block scanner's anchors: never a whole common log word as a literal's suffix (each occurrence of
the word would cost a Python-level check on every log that has it)."""

from cudadoctor.explain import scan, signatures


def test_no_literal_is_anchored_on_a_common_log_word():
    sc = scan.Scanner(signatures.load())
    for lit in list(sc.targets) + list(sc.context):
        a = scan._anchor(lit)
        assert a == 0 or lit[a:] not in scan._LOG_WORDS, lit


def test_after_upgrading_the_kernel_is_not_anchored_on_kernel():
    lit = b"after upgrading the kernel"
    assert lit[scan._anchor(lit):] != b"kernel"


def test_no_literal_is_anchored_on_a_space():
    # a space is the commonest byte of any log: every one would enter the trie
    sc = scan.Scanner(signatures.load())
    assert [lit for lit in list(sc.targets) + list(sc.context) if lit[scan._anchor(lit)] == 0x20] == []
