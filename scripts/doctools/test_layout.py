"""Unit tests of layout.py."""

import unittest

from doctools import layout

README = """# x
## Layout of the code

```
src/main.rs         read env
src/add.rs del.rs   one verb each
src/ipam/           the store
tests/it/           root tests: one binary, one module
                    per concern, helpers in common/
docs/, scripts/     the write-ups
```
## Next
```
src/not_layout.rs   another block
```
"""


class Listed(unittest.TestCase):
    def test_paths_names_in_the_same_folder_and_lists(self):
        self.assertEqual(layout.listed(README), [
            "src/main.rs", "src/add.rs", "src/del.rs", "src/ipam/", "tests/it/", "docs/",
            "scripts/"])

    def test_no_block(self):
        self.assertEqual(layout.listed("# x\n"), [])


class Problems(unittest.TestCase):
    def test_a_listed_path_that_is_gone(self):
        exists = lambda p: p != "src/del.rs"
        self.assertEqual(layout.problems(README, exists, ["main.rs", "add.rs", "ipam/"]),
                         ["README.md layout: src/del.rs does not exist"])

    def test_a_module_that_is_not_listed(self):
        found = layout.problems(README, lambda p: True,
                                ["main.rs", "add.rs", "del.rs", "ipam/", "gc.rs", "gc_tests.rs"])
        self.assertEqual(found, ["README.md layout: src/gc.rs is not listed"])

    def test_no_block_is_a_problem(self):
        self.assertEqual(len(layout.problems("# x\n", lambda p: True, [])), 1)


if __name__ == "__main__":
    unittest.main()
