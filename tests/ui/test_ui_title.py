"""The viewer page's ``<title>`` is text: a run id, pattern name or store file name that holds
markup (they come from the checkpoint store, which a hostile file can fill) is escaped there as in
the rest of the page."""
import pytest

from fsmchat.ui.page import error_page, page

HOSTILE = "</title><script>window.__pwned=1</script><b x='"


@pytest.mark.parametrize("render", [lambda t: page({"kind": "runs", "runs": []}, t, live=True),
                                    lambda t: page({"kind": "runs", "runs": []}, t, live=False, report=True),
                                    lambda t: error_page(t, "no such run")])
def test_a_title_with_markup_is_escaped(render):
    html = render(f"fsmchat runs: {HOSTILE}")
    head = html.split("</head>", 1)[0]
    assert "<title>fsmchat runs: &lt;/title&gt;&lt;script&gt;window.__pwned=1&lt;/script&gt;&lt;b x=&#x27;</title>" \
        in head
    assert head.count("<title>") == 1 and head.count("</title>") == 1 and "<script" not in head
    assert "window.__pwned=1</script>" not in html
