#!/usr/bin/env python3
"""Tests of scripts/readme_snippets.py's convention (ctest runs this): which
blocks are snippets, programs or fragments, how annotations are read, the
errors for blocks that break the convention, and the generated fragment
file (includes hoisted, the body on its README lines). Compiling and
running the README's snippets is the ctest test readme_snippets."""
import os
import sys
import unittest

REPO = os.path.abspath(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))
sys.path.insert(0, os.path.join(REPO, "scripts"))
import readme_snippets as rs  # noqa: E402

SAMPLE = """# Title

```sh
echo not C++
```

```cpp
#include <spire.h>
using namespace spire;
Graph g;
```

<!-- snippet: mpirun -np 3 -->
```cpp
HorovodTrainer trainer;
launch_train_with_config(config, trainer);
```

1. In a list:

   <!-- snippet: skip-run -->
   ```cpp
   #include <vector>
   int main() { return 0; }
   ```
"""


class Convention(unittest.TestCase):
    def test_blocks(self):
        s = rs.extract(SAMPLE)
        self.assertEqual([x.line for x in s], [7, 14, 22])
        self.assertEqual([x.kind for x in s], ["fragment", "fragment", "program"])
        self.assertEqual([(x.run, x.ranks) for x in s], [("run", 0), ("mpirun", 3), ("skip-run", 0)])
        self.assertEqual(s[2].code_lines, ["#include <vector>", "int main() { return 0; }"])

    def test_fragment_source(self):
        s = rs.extract(SAMPLE)[0]
        src = rs.source_of(s, "/r/README.md")
        lines = src.split("\n")
        # The include is hoisted above main(), marked with its README line.
        self.assertLess(lines.index("#include <spire.h>"), lines.index("int main() {"))
        self.assertIn('#line 8 "/r/README.md"', lines)
        # The body starts at the block's first code line; the hoisted line stays blank.
        at = lines.index('#line 8 "/r/README.md"', lines.index("int main() {"))
        self.assertEqual(lines[at + 1:at + 4], ["", "using namespace spire;", "Graph g;"])
        self.assertIn("TrainConfig config = spire_readme::tiny_config();", src)

    def test_program_source_is_the_block(self):
        s = rs.extract(SAMPLE)[2]
        src = rs.source_of(s, "/r/README.md")
        self.assertIn('#line 23 "/r/README.md"\n#include <vector>\nint main() { return 0; }\n', src)
        self.assertNotIn("tiny_config", src)

    def test_breaches(self):
        for text, words in [
            ("```c++\nint x;\n```\n", "tag it cpp"),
            ("<!-- snippet: skip-run -->\n\n```cpp\nint x;\n```\n", "right before"),
            ("<!-- snippet: mpirun -np 0 -->\n```cpp\nint x;\n```\n", "unknown snippet annotation"),
            ("<!-- snippet: run-twice -->\n```cpp\nint x;\n```\n", "unknown snippet annotation"),
            ("```cpp\nint x;\n", "never closed"),
        ]:
            with self.assertRaises(rs.ConventionError) as e:
                rs.extract(text)
            self.assertIn(words, str(e.exception))

    def test_the_readme_follows_it(self):
        with open(os.path.join(REPO, "README.md")) as f:
            self.assertGreater(len(rs.extract(f.read())), 0)


if __name__ == "__main__":
    unittest.main()
