"""The index of fsmchat's own tests (docs/testing.md, "fsmchat's own tests") is true: every folder and
file it names exists, every test folder is in it, and every test file sits in a folder it lists."""
import re
from pathlib import Path

TESTS = Path(__file__).resolve().parents[1]
DOC = (TESTS.parent / "docs" / "testing.md").read_text()


def index() -> dict[str, list[str]]:
    """Folder -> the test files its row names, read from the section's table."""
    section = DOC.split("## fsmchat's own tests", 1)[1]
    rows = {}
    for line in section.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) == 3 and cells[1].startswith("`tests/"):
            rows[cells[1].strip("`")] = re.findall(r"`(test_\w+\.py)`", cells[2])
    return rows


def test_the_index_names_only_files_that_exist():
    rows = index()
    assert len(rows) >= 10
    missing = [f"{folder}{name}" for folder, names in rows.items() for name in names
               if not (TESTS.parent / folder / name).is_file()]
    assert missing == []
    assert all(names for names in rows.values()), "a row without files"


def test_every_test_folder_and_file_is_in_the_index():
    rows = index()
    folders = {f"tests/{p.parent.relative_to(TESTS)}/" for p in TESTS.rglob("test_*.py") if p.parent != TESTS}
    assert sorted(folders - set(rows)) == []
    unlisted = [str(p.relative_to(TESTS.parent)) for p in sorted(TESTS.rglob("test_*.py"))
                if p.parent != TESTS and p.name not in rows.get(f"tests/{p.parent.relative_to(TESTS)}/", [])]
    assert unlisted == []
    top = sorted(p.name for p in TESTS.glob("test_*.py"))
    assert top == [], f"test files at the top of tests/ belong in a folder of the index: {top}"
