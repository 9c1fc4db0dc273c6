"""A text/plain file stays a file wherever the target has a form for one (issue 18): Gemini
``inlineData`` text/plain, Anthropic ``document`` with a text source, Responses ``input_file`` with a
text/plain data URL. Chat file parts take PDF only, so toward Chat the file becomes a text part and
the client is warned. Every produced body is validated with the target SDK's request types."""

from __future__ import annotations

import base64

import pytest

from proxai_core import Protocol, translate_request
from tests.conftest import DIRECTIONS

from ..sdk import ANTHROPIC_BODIES, HOSTED, HOSTED_PATHS, hosted_request, validate_request

A, C, R, G = Protocol.ANTHROPIC, Protocol.CHAT, Protocol.RESPONSES, Protocol.GEMINI
B = Protocol.BEDROCK_CONVERSE
CONVERSE_PATH = "/model/anthropic.claude-sonnet-4-5/converse"
#: a Converse document name allows no "." (letters, digits, spaces, hyphens, brackets)
CONVERSE_NAME = "notes"
TEXT = "Meeting notes — café\nline 2: ✓ done\n"
B64 = base64.b64encode(TEXT.encode()).decode()
NAME = "notes.txt"
GEMINI_PATH = "/v1beta/models/gemini-2.5-flash:generateContent"

#: the file as each client sends it, after a short question
FILE_PART = {
    G: {"inlineData": {"mimeType": "text/plain", "data": B64}},
    A: {"type": "document", "source": {"type": "text", "media_type": "text/plain", "data": TEXT}, "title": NAME},
    R: {"type": "input_file", "file_data": f"data:text/plain;base64,{B64}", "filename": NAME},
    # OpenAI itself takes PDF only here, but Chat-compatible servers and gateways accept text files
    C: {"type": "file", "file": {"file_data": f"data:text/plain;base64,{B64}", "filename": NAME}},
    B: {"document": {"format": "txt", "name": CONVERSE_NAME, "source": {"text": TEXT}}},
}
#: which sources carry the file's name (Gemini inline data has none)
NAMED = {A, R, C, *HOSTED}
for _p in HOSTED:  # Claude hosted by a cloud sends the Anthropic part
    FILE_PART[_p] = FILE_PART[A]
CHAT_WARNING = "text/plain files were sent as text parts (Chat Completions has no file part for text: its file parts take PDF only)"


def request(src: Protocol, part: dict | None = None) -> dict:
    part = part or FILE_PART[src]
    if src is B:
        return {"messages": [{"role": "user", "content": [{"text": "Summarize the file."}, part]}],
                "inferenceConfig": {"maxTokens": 100}}
    if src is G:
        return {"contents": [{"role": "user", "parts": [{"text": "Summarize the file."}, part]}],
                "generationConfig": {"maxOutputTokens": 100}}
    if src in ANTHROPIC_BODIES:
        body = {"model": "claude-sonnet-4-5", "max_tokens": 100, "messages": [
            {"role": "user", "content": [{"type": "text", "text": "Summarize the file."}, part]}]}
        return hosted_request(src, body) if src in HOSTED else body
    if src is R:
        return {"model": "gpt-5", "max_output_tokens": 100, "input": [
            {"role": "user", "content": [{"type": "input_text", "text": "Summarize the file."}, part]}]}
    return {"model": "gpt-4o", "max_completion_tokens": 100, "messages": [
        {"role": "user", "content": [{"type": "text", "text": "Summarize the file."}, part]}]}


def translate(body: dict, src: Protocol, dst: Protocol, w: list[str] | None = None) -> dict:
    path = GEMINI_PATH if src is G else CONVERSE_PATH if src is B else HOSTED_PATHS.get(src.value)
    out = translate_request(body, src, dst, warnings=w, path=path)
    validate_request(dst, out)
    return out


def user_parts(body: dict, protocol: Protocol) -> list:
    if protocol is G:
        return body["contents"][0]["parts"]
    if protocol is R:
        return body["input"][0]["content"]
    return body["messages"][0]["content"]


def file_of(body: dict, protocol: Protocol) -> dict:
    """The one part after the question."""
    parts = user_parts(body, protocol)
    assert len(parts) == 2, parts
    return parts[1]


@pytest.mark.parametrize("src,dst", DIRECTIONS, ids=[f"{s.name}->{t.name}" for s, t in DIRECTIONS])
def test_text_file_in_every_direction(src, dst):
    w: list[str] = []
    out = translate(request(src), src, dst, w)
    if dst is C:  # no file form: the text, and a warning saying so
        parts = user_parts(out, C)
        named = {p: f"{NAME}\n\n{TEXT}" for p in ANTHROPIC_BODIES}  # (a title goes first; a Converse name is a file name)
        assert parts[1] == {"type": "text", "text": named.get(src, TEXT)}
        assert CHAT_WARNING in w
        return
    assert w == []
    part = file_of(out, dst)
    if src is B:  # (its name has no extension)
        if dst in ANTHROPIC_BODIES:
            assert part == {"type": "document", "source": {"type": "text", "media_type": "text/plain", "data": TEXT},
                            "title": CONVERSE_NAME}
        elif dst is R:
            assert part["file_data"] == f"data:text/plain;base64,{B64}" and part["filename"] == CONVERSE_NAME
        else:
            assert part == {"inlineData": {"mimeType": "text/plain", "data": B64}}
        return
    if dst is B:  # text stays text; a file given as bytes stays bytes, its name without extension
        doc = part["document"]
        assert doc["format"] == "txt" and doc["name"] == (CONVERSE_NAME if src in NAMED else "document-1")
        assert doc["source"] in ({"text": TEXT}, {"bytes": B64})
        return
    if dst is G:
        assert part == {"inlineData": {"mimeType": "text/plain", "data": B64}}
    elif dst in ANTHROPIC_BODIES:
        want = {"type": "document", "source": {"type": "text", "media_type": "text/plain", "data": TEXT}}
        assert part == (dict(want, title=NAME) if src in NAMED else want)
    else:
        assert part == {"type": "input_file", "file_data": f"data:text/plain;base64,{B64}",
                        "filename": NAME if src in NAMED else "document.txt"}


@pytest.mark.parametrize("via", [A, R], ids=["via-ANTHROPIC", "via-RESPONSES"])
def test_gemini_round_trip_gives_back_the_same_part(via):
    body = request(G)
    back = translate(translate(body, G, via), via, G)
    assert back["contents"] == body["contents"]


@pytest.mark.parametrize("src,via", [(A, R), (R, A), (A, G), (R, G)],
                         ids=["ANTHROPIC-via-RESPONSES", "RESPONSES-via-ANTHROPIC", "ANTHROPIC-via-GEMINI",
                              "RESPONSES-via-GEMINI"])
def test_round_trip_keeps_the_file(src, via):
    back = file_of(translate(translate(request(src), src, via), via, src), src)
    if via is G:  # Gemini inline data has no name: the file comes back without it
        want = {k: v for k, v in FILE_PART[src].items() if k != "title"}
        if src is R:
            want["filename"] = "document.txt"
        assert back == want
    else:
        assert back == FILE_PART[src]


def test_untitled_anthropic_text_document_reaches_gemini_as_inline_text_plain():
    part = {"type": "document", "source": {"type": "text", "media_type": "text/plain", "data": TEXT}}
    out = translate(request(A, part), A, G)
    assert file_of(out, G) == {"inlineData": {"mimeType": "text/plain", "data": B64}}
    assert file_of(translate(out, G, A), A) == part


def test_anthropic_content_document_is_a_text_file_toward_responses_and_gemini():
    part = {"type": "document", "title": "Report", "source": {"type": "content", "content": [
        {"type": "text", "text": "first"}, {"type": "text", "text": "second"}]}}
    joined = base64.b64encode(b"first\n\nsecond").decode()
    assert file_of(translate(request(A, part), A, R), R) == {
        "type": "input_file", "file_data": f"data:text/plain;base64,{joined}", "filename": "Report"}
    assert file_of(translate(request(A, part), A, G), G) == {"inlineData": {"mimeType": "text/plain",
                                                                              "data": joined}}


def test_text_file_in_a_tool_result_stays_a_file_toward_gemini_and_responses():
    body = {"model": "claude-sonnet-4-5", "max_tokens": 100, "messages": [
        {"role": "user", "content": "Read the notes."},
        {"role": "assistant", "content": [{"type": "tool_use", "id": "toolu_1", "name": "read", "input": {}}]},
        {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "toolu_1", "content": [
            {"type": "text", "text": "here"}, FILE_PART[A]]}]},
    ]}
    out = translate(body, A, G)
    fr = out["contents"][2]["parts"][0]["functionResponse"]
    assert fr["parts"] == [{"inlineData": {"mimeType": "text/plain", "data": B64}}]
    back = translate(out, G, A)
    result = back["messages"][2]["content"][0]
    assert result["content"][1]["source"] == FILE_PART[A]["source"]
    # and toward Responses: an input_file in the function call output
    out = translate(body, A, R)
    output = next(it for it in out["input"] if it.get("type") == "function_call_output")["output"]
    assert output[1] == FILE_PART[R]


def test_chat_warning_once_for_many_text_files():
    body = request(R)
    body["input"][0]["content"] += [dict(FILE_PART[R], filename="more.txt")]
    w: list[str] = []
    out = translate(body, R, C, w)
    assert [p["type"] for p in out["messages"][0]["content"]] == ["text", "text", "text"]
    assert w.count(CHAT_WARNING) == 1


def test_pdf_toward_chat_stays_a_file_without_warning():
    pdf = base64.b64encode(b"%PDF-1.4 tiny").decode()
    w: list[str] = []
    out = translate(request(R, {"type": "input_file", "file_data": f"data:application/pdf;base64,{pdf}",
                                "filename": "a.pdf"}), R, C, w)
    assert file_of(out, C) == {"type": "file", "file": {"file_data": f"data:application/pdf;base64,{pdf}",
                                                        "filename": "a.pdf"}}
    assert w == []
