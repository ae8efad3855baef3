"""Unit tests of refs.py: which references are checked, broken, moved or unchecked."""

import unittest

from doctools import refs

CODE = {"src/a.rs": ["fn one() {}", "", "fn two() {}", "fn two_again() {}", "", "", "fn two() {}"]}


def check(doc: str, fix=False):
    c = refs.Checker(lambda p: CODE.get(p), fix=fix)
    return c, c.doc("doc.md", doc)


def ref(line, snippet, path="src/a.rs"):
    return f'`{path}:{line}` <!-- ref: {path}:{line} contains "{snippet}" -->'


class Check(unittest.TestCase):
    def test_a_reference_to_the_right_line_passes(self):
        c, _ = check(f"see {ref(3, 'fn two()')}\n")
        self.assertEqual((c.problems, c.checked), ([], 1))

    def test_a_moved_snippet_is_reported_with_where_it_is_now(self):
        c, out = check(f"see {ref(1, 'fn two_again')}")
        self.assertEqual(len(c.problems), 1)
        self.assertIn('doc.md:1: src/a.rs:1: line 1 does not contain "fn two_again"', c.problems[0])
        self.assertIn("now at line(s): 4", c.problems[0])
        self.assertEqual(out, f"see {ref(1, 'fn two_again')}", "a check changes nothing")

    def test_a_gone_snippet_a_missing_file_and_an_empty_snippet_are_problems(self):
        c, _ = check("\n".join([ref(1, "fn three"), ref(1, "x", path="src/b.rs"), ref(1, "")]))
        self.assertEqual(len(c.problems), 3)
        self.assertIn("no line of src/a.rs does now", c.problems[0])
        self.assertIn("src/b.rs does not exist", c.problems[1])
        self.assertIn("empty snippet", c.problems[2])

    def test_a_visible_reference_without_a_comment_is_a_problem(self):
        c, _ = check("the step at `src/a.rs:3` and `tests/it/gate.rs:12`, and `README.md:3`")
        self.assertEqual(c.problems, [
            'doc.md:1: src/a.rs:3 has no <!-- ref: src/a.rs:3 contains "..." --> on its line',
            'doc.md:1: tests/it/gate.rs:12 has no <!-- ref: tests/it/gate.rs:12 contains "..." --> '
            "on its line"])

    def test_a_comment_covers_only_its_own_path_and_line(self):
        c, _ = check(f"{ref(3, 'fn two()')} and src/a.rs:30")
        self.assertEqual(len(c.problems), 1)
        self.assertIn("src/a.rs:30 has no", c.problems[0])


class Fix(unittest.TestCase):
    def test_fix_moves_the_comment_and_the_visible_text(self):
        c, out = check(f"see {ref(1, 'fn two_again')} (src/a.rs:1)", fix=True)
        self.assertEqual(out, f"see {ref(4, 'fn two_again')} (src/a.rs:4)")
        self.assertEqual(c.problems, [])
        self.assertEqual(c.moved, ["doc.md:1: src/a.rs:1: moved to src/a.rs:4 (fn two_again)"])

    def test_fix_takes_the_nearest_of_several_lines(self):
        _, out = check(ref(6, "fn two()"), fix=True)
        self.assertEqual(out, ref(7, "fn two()"))
        _, out = check(ref(2, "fn two()"), fix=True)
        self.assertEqual(out, ref(3, "fn two()"))

    def test_fix_does_not_touch_a_longer_number(self):
        self.assertEqual(refs.move("src/a.rs:1 src/a.rs:12 src/a.rs:1.", "src/a.rs", 1, 4),
                         "src/a.rs:4 src/a.rs:12 src/a.rs:4.")

    def test_fix_leaves_a_gone_snippet_a_problem(self):
        c, out = check(ref(1, "fn three"), fix=True)
        self.assertEqual(out, ref(1, "fn three"))
        self.assertEqual(len(c.problems), 1)


class Nearest(unittest.TestCase):
    def test_the_first_of_two_equally_near(self):
        self.assertEqual(refs.nearest([3, 7], 5), 3)
        self.assertEqual(refs.nearest([9], 1), 9)


if __name__ == "__main__":
    unittest.main()
