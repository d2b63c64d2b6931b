"""The README's and the guides' code blocks that need torch and TensorFlow, run as a reader runs them, page by page
(the convention: tests/doc_blocks.py). Their framework-free blocks run in tests/shared/test_docs.py."""

from __future__ import annotations

import pytest

from tests import doc_blocks

PAGES_WITH_FRAMEWORK_BLOCKS = [
    page for page in doc_blocks.PAGES if any(b.runs and b.needs_frameworks for b in doc_blocks.blocks(page))
]


@pytest.mark.parametrize("page", PAGES_WITH_FRAMEWORK_BLOCKS, ids=lambda page: page.name)
def test_the_pages_blocks_run_as_written(page, tmp_path):
    ran = doc_blocks.run_page(page, tmp_path, frameworks=True)
    assert any(where for where in ran), f"{page.name}: no block ran"


def test_a_page_with_framework_blocks_is_found():
    """The list above is not empty by accident: the README's tour needs both stacks."""
    assert doc_blocks.REPO / "README.md" in PAGES_WITH_FRAMEWORK_BLOCKS


NEGATIVE_PAGE = """# a page

```python
import numpy as np
import torch_impl
model = torch_impl.build("reverse_bahdanau")
```

```bash
rosetta port model.pt model.keras --model reverse_bahdanau
```
"""


def test_negative_control_a_command_that_fails_in_process_is_caught(tmp_path):
    """A `rosetta` line run through shared.cli.main that exits 2 (no such file) fails the page, naming the block."""
    page = tmp_path / "page.md"
    with pytest.raises(AssertionError, match=r"page.md:9: `rosetta port model.pt .*` exits 2"):
        doc_blocks.run_page(page, tmp_path / "run", frameworks=True, text=NEGATIVE_PAGE)


def test_negative_control_a_python_block_that_raises_is_caught(tmp_path):
    """A framework block whose call fails (an unknown catalogue model) fails the page, naming the block."""
    page = tmp_path / "page.md"
    text = NEGATIVE_PAGE.replace('"reverse_bahdanau")', '"no_such_model")')
    with pytest.raises(AssertionError, match=r"page.md:3: the python block raises ValueError"):
        doc_blocks.run_page(page, tmp_path / "run", frameworks=True, text=text)


def test_later_blocks_see_earlier_blocks_files_and_names(tmp_path):
    """One work folder and one namespace per page: a file block, a python block and a command build on each other."""
    text = """# a page

<!-- file: mine.py -->
```python
VALUE = 3
```

```python
import numpy as np
import torch, mine
np.save("three.npy", np.full(2, mine.VALUE))
```

```bash
python -c "import numpy as np, torch; assert np.load('three.npy').tolist() == [3, 3]"
```
"""
    ran = doc_blocks.run_page(tmp_path / "page.md", tmp_path / "run", frameworks=True, text=text)
    assert ran == ["page.md:4", "page.md:8", "page.md:14"]


def test_every_name_the_prose_uses_resolves_at_its_new_place():
    """Each `shared.…`, `torch_impl.…`, `tf_impl.…` name a page mentions outside its code blocks imports and resolves,
    with no DeprecationWarning (a page naming a moved place would teach the old one)."""
    names = {name for page in doc_blocks.PAGES for name in doc_blocks.dotted_names(page.read_text())}
    assert {"tf_impl.files.load_keras", "shared.port"} <= names  # the scan sees the guides' names
    for name in sorted(names):
        doc_blocks.resolve(name)
