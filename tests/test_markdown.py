"""Model output as the page shows it: coloured code with a copy control, MathML, safe links.

Each test names what a reader would see break: raw LaTeX, `\\,` eaten by markdown's
escapes, links that leave the app, a currency sentence taken for math, markup that acts.
"""

from __future__ import annotations

import re

import pytest

from webapp.web.markdown import render_markdown


def html(text: str) -> str:
    return str(render_markdown(text))


def test_fenced_code_is_coloured_by_pygments_and_gets_a_copy_control() -> None:
    out = html("```python\ndef f(x):\n    return '<b>'  # note\n```")
    assert '<div class="code-block">' in out
    assert 'data-action="copy-code"' in out
    assert '<span class="code-language">python</span>' in out
    assert '<code class="language-python">' in out
    assert '<span class="k">def</span>' in out  # keyword
    assert '<span class="c1"># note</span>' in out  # comment
    assert "&lt;b&gt;" in out and "<b>" not in out  # the code's own markup stays text


def test_unknown_or_missing_language_is_shown_plain_with_the_copy_control() -> None:
    for text in ("```nosuchlang\nx = 1\n```", "```\nx = 1\n```", "    x = 1"):
        out = html(text)
        assert 'data-action="copy-code"' in out, text
        assert '<span class="' not in out.split("<pre")[1], text
        assert "x = 1" in out


def test_math_in_all_four_spellings_becomes_mathml() -> None:
    out = html(r"Inline $x^2$, \(a+b\), displayed $$\frac{1}{2}$$ and \[\sqrt{y}\].")
    assert out.count("<math") == 4
    assert '<math display="inline"><mrow><msup><mi>x</mi><mn>2</mn></msup>' in out
    assert "<mfrac>" in out
    assert "<msqrt>" in out
    assert "$" not in out and "\\(" not in out and "\\[" not in out
    assert "<div" not in out  # displayed math inside a paragraph does not split it


def test_a_thin_space_survives_instead_of_becoming_a_comma() -> None:
    out = html(r"$\int_0^1 x\,dx$")
    assert '<mspace width="0.167em">' in out
    assert "," not in re.sub(r"<[^>]+>", "", out)


def test_displayed_math_on_its_own_lines() -> None:
    out = html("Energy:\n\n$$\nE = mc^2\n$$\n\nDone.")
    assert '<div class="math block">' in out and 'display="block"' in out
    assert "<mi>E</mi>" in out


def test_money_is_not_math() -> None:
    out = html("It costs $5 and $10 today.")
    assert "<math" not in out
    assert "$5 and $10" in out


def test_broken_latex_is_shown_as_its_source_and_never_fails() -> None:
    out = html(r"Look: $\frac{1}{$ and on.")
    assert '<code class="math-source">' in out
    assert "and on." in out


def test_markup_smuggled_through_math_is_removed() -> None:
    out = html(r"$$\text{<script>alert(1)</script><img src=x onerror=alert(2)>}$$")
    assert "<script" not in out and "<img" not in out and "onerror" not in out
    assert "<math" in out


def test_links_open_in_a_new_tab_without_handing_over_the_opener() -> None:
    out = html("See [the docs](https://example.com/docs).")
    link = re.search(r"<a [^>]+>", out)
    assert link is not None
    assert 'target="_blank"' in link.group(0)
    assert "noopener" in link.group(0)


def test_bare_urls_are_linked_but_file_names_are_not() -> None:
    out = html("Read https://example.com/a?b=1 and then edit main.py.")
    assert '<a href="https://example.com/a?b=1"' in out
    assert "main.py" in out and 'href="http://main.py"' not in out


@pytest.mark.parametrize(
    "text",
    [
        "<script>alert(1)</script>",
        '<div hx-get="/pwned" hx-trigger="load">x</div>',
        "[x](javascript:alert(1))",
        '<pre><code class="language-python">fake</code></pre>',
        '<button data-action="copy-code">Copy</button>',
    ],
)
def test_model_markup_never_becomes_elements(text: str) -> None:
    tags = re.findall(r"<[a-z][^>]*>", html(text))
    for tag in tags:
        for needle in ("<script", "hx-", "javascript", "<button", "code-block", "language-"):
            assert needle not in tag, (text, tags)


def test_a_huge_block_is_shown_plain_not_coloured() -> None:
    out = html("```python\n" + "x = 1\n" * 40_000 + "```")
    assert '<span class="n">' not in out
    assert 'data-action="copy-code"' in out


def test_code_blocks_and_tables_scroll_and_take_the_focus_once() -> None:
    """What scrolls sideways must be reachable by keyboard: a named, focusable group; an
    answer stored before the rule gets it when shown, and showing twice adds nothing."""
    from webapp.web.markdown import scrollable_parts_focusable

    table = "| size | tokens |\n|---|---|\n| medium | 16,384 |"
    out = html(f"```python\nx = 1\n```\n\n    plain\n\n{table}")
    assert '<pre tabindex="0" role="group" aria-label="python code">' in out
    assert '<pre tabindex="0" role="group" aria-label="Code">' in out
    assert out.count('class="table-scroll" tabindex="0" role="group" aria-label="Table"') == 1
    assert 'aria-label="Copy code"' in out
    assert scrollable_parts_focusable(out) == out
    stored = out.replace('<pre tabindex="0" role="group" aria-label="python code">', "<pre>")
    stored = stored.replace(
        '<div class="table-scroll" tabindex="0" role="group" aria-label="Table">', ""
    ).replace("</table></div>", "</table>")
    assert "<pre>" in stored and "table-scroll" not in stored
    assert scrollable_parts_focusable(stored).count("table-scroll") == 1
