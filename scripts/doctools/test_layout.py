"""Unit tests of layout.py."""

import pathlib
import unittest

from doctools import layout

DOC = """# x
## Layout of the code

```
src/main.rs         read env
src/wire/ port.rs    the wiring, and its bridge port
src/verbs/          one verb each
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
        self.assertEqual(layout.listed(DOC), [
            "src/main.rs", "src/wire/", "src/wire/port.rs", "src/verbs/", "tests/it/",
            "docs/", "scripts/"])

    def test_no_block(self):
        self.assertEqual(layout.listed("# x\n"), [])


class Problems(unittest.TestCase):
    def test_a_listed_path_that_is_gone(self):
        exists = lambda p: p != "src/wire/port.rs"
        self.assertEqual(layout.problems(DOC, exists, ["main.rs", "wire/", "verbs/"]),
                         ["docs/design.md layout: src/wire/port.rs does not exist"])

    def test_a_module_that_is_not_listed(self):
        found = layout.problems(DOC, lambda p: True,
                                ["main.rs", "verbs/", "firewall/", "gc_tests.rs"])
        self.assertEqual(found, ["docs/design.md layout: src/firewall/ is not listed"])

    def test_messages_name_the_doc_given(self):
        found = layout.problems(DOC, lambda p: True, ["main.rs", "verbs/", "gc.rs"], "x.md")
        self.assertEqual(found, ["x.md layout: src/gc.rs is not listed"])

    def test_no_block_is_a_problem(self):
        self.assertEqual(len(layout.problems("# x\n", lambda p: True, [])), 1)


FOLDERS = """## Layout of the code

```
src/main.rs         read env
src/nft/            encoding: objects.rs, batch.rs; store/: pending.rs
src/verbs/          one verb each
```
"""


class Descriptions(unittest.TestCase):
    def test_names_of_a_folder_s_own_files(self):
        self.assertEqual(layout.descriptions(FOLDERS),
                         {"src/nft/": {"objects.rs", "batch.rs", "store/", "pending.rs"},
                          "src/verbs/": set()})

    def test_a_folder_naming_files_names_all_its_own_each_there(self):
        tree = {"src/nft/": ["mod.rs", "objects.rs", "batch.rs", "store/", "expr.rs"],
                "src/verbs/": ["add.rs"]}
        there = {"src/main.rs", "src/nft/", "src/verbs/", "src/nft/objects.rs",
                 "src/nft/batch.rs", "src/nft/store/", "src/nft/store/pending.rs"}
        found = layout.problems(FOLDERS, lambda p: p in there, ["main.rs", "nft/", "verbs/"],
                                children=lambda f: tree[f])
        self.assertEqual(found, [
            "docs/design.md layout: src/nft/expr.rs is not named in src/nft/'s description"])
        gone = there - {"src/nft/store/pending.rs"}
        found = layout.problems(FOLDERS, lambda p: p in gone, ["main.rs", "nft/", "verbs/"],
                                children=lambda f: [c for c in tree[f] if c != "expr.rs"])
        self.assertEqual(found, [
            "docs/design.md layout: src/nft/ names pending.rs, which is not there"])


class TheRealDoc(unittest.TestCase):
    def test_the_doc_check_refs_reads_has_the_block(self):
        doc = pathlib.Path(__file__).resolve().parents[2] / layout.DOC
        self.assertIn(layout.HEADING, doc.read_text())
        self.assertIn("src/lib.rs", layout.listed(doc.read_text()))


if __name__ == "__main__":
    unittest.main()
