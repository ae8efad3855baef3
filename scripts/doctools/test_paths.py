"""Unit tests of paths.py: which prose paths are ours, how their forms are read, and
which are reported."""

import unittest

from doctools import paths

TREE = paths.Tree([
    "README.md",
    "src/main.rs",
    "src/ipam/store/mod.rs",
    "tests/it/main.rs",
    "tests/it/dropin/mod.rs",
    "docs/lab/002-gate.txt",
    "scripts/check-refs.sh",
])


def problems(text: str, source=paths.markdown_prose):
    return paths.check("doc", source(text), TREE)


class Found(unittest.TestCase):
    def test_every_top_folder_is_a_root(self):
        line = " ".join(f"{r}/x" for r in paths.ROOTS)
        self.assertEqual(paths.paths_in(line), [f"{r}/x" for r in paths.ROOTS])

    def test_punctuation_backticks_and_a_line_number_are_not_part_of_the_path(self):
        self.assertEqual(
            paths.paths_in("see `src/main.rs:12`, (tests/it/main.rs). Or src/ipam/store/."),
            ["src/main.rs", "tests/it/main.rs", "src/ipam/store/"])

    def test_paths_inside_other_paths_urls_and_variables_are_not_ours(self):
        self.assertEqual(paths.paths_in(
            "/usr/src/linux ../src/x containerd/docs/cri/config.md "
            "https://github.com/x/y/blob/main/src/z.go $HOME/src/q ~/docs/a x.docs/b"), [])

    def test_a_path_after_its_owner_s_name_is_that_project_s(self):
        self.assertEqual(paths.paths_in("netavark's src/firewall/mod.rs and containerd's "
                                        "`docs/cri/config.md`"), [])
        self.assertEqual(paths.paths_in("academy's src/gone.rs"), ["src/gone.rs"])

    def test_a_word_that_only_ends_like_a_root_is_not_a_path(self):
        self.assertEqual(paths.paths_in("subsrc/x mydocs/y tests"), [])


class Forms(unittest.TestCase):
    def test_a_file_and_a_folder_exist_with_or_without_the_slash(self):
        self.assertEqual(problems("src/main.rs src/ipam/ src/ipam/store tests/it/dropin/"), [])

    def test_a_missing_file_or_folder_is_reported_with_its_line(self):
        self.assertEqual(problems("ok src/main.rs\nsee src/ipam/store.rs and tests/leaks/"), [
            "doc:2: src/ipam/store.rs does not exist",
            "doc:2: tests/leaks/ does not exist"])

    def test_a_placeholder_needs_only_its_folder(self):
        self.assertEqual(problems("put it in `tests/it/<concern>.rs` or tests/it/<c>/mod.rs"), [])
        self.assertEqual(problems("tests/unit/<concern>.rs"),
                         ["doc:1: tests/unit/<concern>.rs: tests/unit/ does not exist"])

    def test_a_glob_must_match_something(self):
        self.assertEqual(problems("docs/lab/*.txt and tests/it/*/mod.rs"), [])
        self.assertEqual(problems("docs/lab/*.svg"), ["doc:1: docs/lab/*.svg matches nothing"])

    def test_every_choice_of_a_brace_must_exist(self):
        self.assertEqual(problems("tests/it/{main.rs,dropin}"), [])
        self.assertEqual(problems("src/{main,add}.rs"), ["doc:1: src/{main,add}.rs does not exist"])
        self.assertEqual(paths.expand("a/{b,c}/{d,e}"), ["a/b/d", "a/b/e", "a/c/d", "a/c/e"])


class Sources(unittest.TestCase):
    def test_rust_comments_of_every_kind_are_read_and_code_is_not(self):
        rust = "\n".join([
            "//! module doc: src/gone.rs",
            "/// item doc: tests/gone.rs",
            'let x = "src/in_a_string.rs"; // trailing: docs/gone.md',
            'let url = "http://host/x"; let y = "src/also_a_string.rs";',
            "    // indented: src/main.rs",
        ])
        self.assertEqual(problems(rust, paths.rust_comments), [
            "doc:1: src/gone.rs does not exist",
            "doc:2: tests/gone.rs does not exist",
            "doc:3: docs/gone.md does not exist"])

    def test_an_escaped_quote_does_not_end_a_string(self):
        self.assertEqual(list(paths.rust_comments(r'let s = "a \" // no"; // yes src/x')),
                         [(1, "// yes src/x")])

    def test_toml_comments_are_read_and_values_are_not(self):
        toml = '# only src/netlink.rs may use it\npath = "src/nothing.rs"  # see src/main.rs\n'
        self.assertEqual(problems(toml, paths.toml_comments),
                         ["doc:1: src/netlink.rs does not exist"])

    def test_seen_counts_every_path_checked(self):
        seen = []
        paths.check("doc", paths.markdown_prose("src/main.rs src/x.rs"), TREE, seen)
        self.assertEqual(seen, ["src/main.rs", "src/x.rs"])


if __name__ == "__main__":
    unittest.main()
