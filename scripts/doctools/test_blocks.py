"""Unit tests of blocks.py: what lands between the markers, and what is never lost."""

import unittest

from doctools import blocks


def reader(files: dict):
    def read(name):
        return files[name]
    return read


class EmbedLab(unittest.TestCase):
    def test_the_block_holds_a_fence_around_the_transcript(self):
        doc = "intro\n<!-- lab:002-gate -->\nold\nlines\n<!-- /lab -->\nafter\n"
        out = blocks.embed_lab(doc, reader({"002-gate": "# ip link\n1: lo\n"}))
        self.assertEqual(out, "intro\n<!-- lab:002-gate -->\n```text\n# ip link\n1: lo\n```\n"
                              "<!-- /lab -->\nafter\n")

    def test_embedding_twice_changes_nothing(self):
        doc = "<!-- lab:a -->\n<!-- /lab -->\n"
        read = reader({"a": "x\ny"})
        once = blocks.embed_lab(doc, read)
        self.assertEqual(blocks.embed_lab(once, read), once)

    def test_several_blocks_and_text_between_them(self):
        doc = "<!-- lab:a -->\n<!-- /lab -->\nmiddle\n<!-- lab:b -->\nold\n<!-- /lab -->"
        out = blocks.embed_lab(doc, reader({"a": "A", "b": "B"}))
        self.assertEqual(out, "<!-- lab:a -->\n```text\nA\n```\n<!-- /lab -->\nmiddle\n"
                              "<!-- lab:b -->\n```text\nB\n```\n<!-- /lab -->")

    def test_a_marker_inside_a_line_is_not_a_block(self):
        doc = "see `<!-- lab:a -->` in the source\n"
        self.assertEqual(blocks.embed_lab(doc, reader({})), doc)

    def test_a_missing_transcript_is_an_error(self):
        with self.assertRaisesRegex(blocks.MarkerError, "no transcript for gone"):
            blocks.embed_lab("<!-- lab:gone -->\n<!-- /lab -->\n", reader({}))

    def test_a_start_without_an_end_is_an_error_not_a_truncated_doc(self):
        with self.assertRaises(blocks.MarkerError):
            blocks.embed_lab("<!-- lab:a -->\nthe rest of the doc\n", reader({"a": "A"}))


class EmbedBench(unittest.TestCase):
    DOC = "# Performance\ntext\n<!-- bench:latest -->\nold\n<!-- /bench:latest -->\nafter\n"

    def test_latest_without_its_heading_replaces_the_block(self):
        out = blocks.embed_bench(self.DOC, "## Benchmark: x\n\n| a |\n\n")
        self.assertEqual(out, "# Performance\ntext\n<!-- bench:latest -->\n| a |\n"
                              "<!-- /bench:latest -->\nafter\n")

    def test_embedding_twice_changes_nothing(self):
        once = blocks.embed_bench(self.DOC, "## B\n| a |\n")
        self.assertEqual(blocks.embed_bench(once, "## B\n| a |\n"), once)

    def test_no_block_is_an_error(self):
        with self.assertRaises(blocks.MarkerError):
            blocks.embed_bench("# t\n<!-- bench:latest -->\n", "x")

    def test_links_relative_to_the_root_are_rebased_for_a_doc_in_a_folder(self):
        latest = ("## B\n![chart](bench/results/scaling.svg) [m](bench/README.md)\n"
                  "[web](https://example.org/x) [here](#targets) [abs](/etc/x)\n")
        out = blocks.embed_bench(self.DOC, latest, "../")
        self.assertIn("![chart](../bench/results/scaling.svg) [m](../bench/README.md)\n"
                      "[web](https://example.org/x) [here](#targets) [abs](/etc/x)\n", out)

    def test_rebasing_twice_changes_nothing(self):
        latest = "## B\n![chart](bench/results/scaling.svg)\n"
        once = blocks.embed_bench(self.DOC, latest, "../")
        self.assertEqual(blocks.embed_bench(once, latest, "../"), once)


class TheBenchDoc(unittest.TestCase):
    """`make bench` fills docs/performance.md's block; the README has none any more."""

    def test_the_doc_embed_bench_writes_has_the_block(self):
        from doctools import __main__ as cli
        text = (cli.ROOT / cli.BENCH_DOC).read_text()
        self.assertEqual(cli.BENCH_DOC, "docs/performance.md")
        self.assertEqual(blocks.embed_bench(text, "## B\n| a |\n").count(blocks.BENCH_START), 1)

    def test_the_readme_has_no_bench_block(self):
        from doctools import __main__ as cli
        self.assertFalse(blocks.BENCH_START in (cli.ROOT / "README.md").read_text())


if __name__ == "__main__":
    unittest.main()
