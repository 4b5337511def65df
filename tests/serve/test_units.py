"""The server's pieces without HTTP: incremental detokenisation, stop strings, request
validation, and the Prometheus text."""

from __future__ import annotations

import re

import pytest

from runtime.serve.detokenizer import IncrementalDetokenizer, TextStream
from runtime.serve.metrics import ServerMetrics
from runtime.serve.protocol import APIError, ChatCompletionRequest, CompletionRequest, parse
from runtime.serve.serving import ModelInfo, prepare_chat, prepare_completion
from tests.serve.helpers import byte_level_tokenizer

TEXT = "héllo wörld € ok 你好"


@pytest.fixture(scope="module")
def tok():
    return byte_level_tokenizer(chat_template=True)


def info(tok, **kw) -> ModelInfo:
    args = dict(name="tiny", tokenizer=tok, vocab_size=len(tok), max_model_len=64, pool_tokens=1024,
                max_tokens_limit=32)
    return ModelInfo(**{**args, **kw})


# --- detokenisation ---------------------------------------------------------------------------

@pytest.mark.parametrize("step", [1, 2, 3, 7])
def test_streamed_text_never_splits_a_character(tok, step):
    """"é" is 2 byte tokens, "€" and "你" 3: fed a few tokens at a time, every released piece is
    whole characters, and the pieces add up to the text."""
    ids = tok.encode(TEXT)
    assert len(ids) > len(TEXT)  # multi-byte characters really span several tokens
    detok = IncrementalDetokenizer(tok)
    pieces = [detok.push(ids[i:i + step]) for i in range(0, len(ids), step)]
    assert "".join(pieces) + detok.push([], final=True) == TEXT
    assert all("\ufffd" not in p for p in pieces)


def test_a_broken_character_is_released_at_the_end(tok):
    """A random model can emit a lone lead byte: held while it may still complete, flushed
    (as U+FFFD, exactly what decoding everything gives) when the request ends."""
    ids = tok.encode("ab€")[:-1]  # "€" without its last byte
    detok = IncrementalDetokenizer(tok)
    assert detok.push(ids) == "ab"
    assert detok.push([], final=True) == tok.decode(ids)[2:]


def test_special_tokens_are_skipped(tok):
    detok = IncrementalDetokenizer(tok)
    assert detok.push([3] + tok.encode("hi") + [2], final=True) == "hi"


@pytest.mark.parametrize("step", [1, 2, 5])
def test_stop_string_cuts_the_text_and_is_never_sent(tok, step):
    ids = tok.encode("one two STOP three")
    stream = TextStream(tok, stop=["STOP", "zzz"])
    sent = ""
    for i in range(0, len(ids), step):
        sent += stream.push(ids[i:i + step])
        assert "S" not in sent  # not even the start of the stop string
        if stream.stopped_by:
            break
    assert sent == "one two " and stream.stopped_by == "STOP"
    assert stream.push(tok.encode("more"), final=True) == ""


def test_text_that_only_looked_like_a_stop_string_is_released(tok):
    stream = TextStream(tok, stop=["END"])
    assert stream.push(tok.encode("the EN")) == "the "  # "EN" may be the start of "END"
    assert stream.push(tok.encode("ough")) == "ENou"  # it was not; "gh" may still be
    assert stream.push([], final=True) == "gh"
    assert stream.text == "the ENough" and stream.stopped_by is None


def test_held_text_is_flushed_at_the_end(tok):
    stream = TextStream(tok, stop=["END"])
    assert stream.push(tok.encode("the EN")) == "the "
    assert stream.push([], final=True) == "EN"
    assert stream.text == "the EN" and stream.stopped_by is None


# --- validation -------------------------------------------------------------------------------

def test_parse_accepts_openai_bodies_and_ignores_unknown_fields():
    req = parse(CompletionRequest, b'{"model": "tiny", "prompt": "hi", "max_tokens": 4, "temperature": 0, '
                                   b'"stream": true, "stream_options": {"include_usage": true}, "user": "u", '
                                   b'"metadata": {"a": 1}}')
    assert req.include_usage and req.max_tokens == 4 and req.temperature == 0.0
    chat = parse(ChatCompletionRequest, b'{"messages": [{"role": "user", "content": [{"type": "text", '
                                        b'"text": "a"}, {"type": "text", "text": "b"}]}], "max_completion_tokens": 3}')
    assert chat.messages[0].as_template_input() == {"role": "user", "content": "ab"}
    assert chat.requested_max_tokens == 3


@pytest.mark.parametrize("body,param,fragment", [
    (b'{"prompt": ', None, "not valid JSON"),
    (b"\xff\xfe", None, "not valid JSON"),
    (b"[1, 2]", None, "object"),
    (b"{}", "prompt", "Field required"),
    (b'{"prompt": 5}', "prompt", "expected a string, a list of token ids"),
    (b'{"prompt": "x", "max_tokens": "16"}', "max_tokens", "valid integer"),
    (b'{"prompt": "x", "max_tokens": 1.5}', "max_tokens", "valid integer"),
    (b'{"prompt": "x", "stream": 1}', "stream", "valid boolean"),
    (b'{"prompt": "x", "temperature": NaN}', "temperature", "finite"),
    (b'{"prompt": "x", "temperature": -1}', "temperature", "greater than or equal to 0"),
    (b'{"prompt": "x", "top_p": 0}', "top_p", "greater than 0"),
    (b'{"prompt": "x", "stop": 7}', "stop", "a string or a list of strings"),
    (b'{"prompt": "x", "n": 2}', "n", "only n=1"),
    (b'{"prompt": "x", "echo": true}', "echo", "echo"),
    (b'{"prompt": "x", "logprobs": 2}', "logprobs", "not supported"),
    (b'{"prompt": "x", "presence_penalty": 0.5}', "presence_penalty", "not supported"),
    (b'{"prompt": "x", "stop": ["a", "b", "c", "d", "e"]}', "stop", "at most 4"),
    (b'{"prompt": "x", "stream_options": {"include_usage": true}}', "stream_options", "stream is true"),
])
def test_parse_refuses_with_the_field_named(body, param, fragment):
    with pytest.raises(APIError) as e:
        parse(CompletionRequest, body)
    assert e.value.status == 400 and e.value.param == param and fragment in e.value.message


def test_prepare_checks_lengths_against_the_model(tok):
    m = info(tok)
    p = prepare_completion(parse(CompletionRequest, b'{"prompt": "hello"}'), m)
    assert p.prompt_token_ids == tok.encode("hello") and p.params.max_tokens == 16  # OpenAI's default
    for body, param, code in [
        (b'{"prompt": "%s"}' % (b"x" * 64), "prompt", "context_length_exceeded"),
        (b'{"prompt": "%s", "max_tokens": 30}' % (b"x" * 40), "max_tokens", "context_length_exceeded"),
        (b'{"prompt": "hi", "max_tokens": 33}', "max_tokens", None),  # over --max-tokens-limit
        (b'{"prompt": [1, 999]}', "prompt", None),
        (b'{"prompt": ""}', "prompt", None),
        (b'{"prompt": ["a", "b"]}', "prompt", None),
    ]:
        with pytest.raises(APIError) as e:
            prepare_completion(parse(CompletionRequest, body), m)
        assert (e.value.status, e.value.param, e.value.code) == (400, param, code), body
    with pytest.raises(APIError) as e:
        prepare_completion(parse(CompletionRequest, b'{"model": "gpt-4", "prompt": "x"}'), m)
    assert e.value.status == 404 and e.value.code == "model_not_found"


def test_chat_default_max_tokens_fills_the_context(tok):
    p = prepare_chat(parse(ChatCompletionRequest, b'{"messages": [{"role": "user", "content": "hi"}]}'),
                     info(tok, max_tokens_limit=1000))
    assert p.prompt_token_ids == tok.encode(tok.apply_chat_template(
        [{"role": "user", "content": "hi"}], tokenize=False, add_generation_prompt=True), add_special_tokens=False)
    assert len(p.prompt_token_ids) + p.params.max_tokens == 64


def test_chat_without_a_template_is_a_clear_400():
    plain = byte_level_tokenizer(chat_template=False)
    with pytest.raises(APIError) as e:
        prepare_chat(parse(ChatCompletionRequest, b'{"messages": [{"role": "user", "content": "hi"}]}'),
                     info(plain))
    assert e.value.status == 400 and "no chat template" in e.value.message


# --- metrics ----------------------------------------------------------------------------------

SAMPLE = re.compile(r'^(vllm:[a-z0-9_]+)\{model_name="[^"]*"(,[a-z_]+="[^"]*")*\} (-?[0-9.e+]+|\+Inf)$')


def test_metrics_text_is_prometheus_exposition():
    m = ServerMetrics('tiny "model"')
    m.set_engine_state(3, 2, 0.25, 100, 40, 1)
    m.record_tokens(10, 0.05, [])
    m.record_tokens(10, None, [0.02, 0.03])
    m.record_finish("length", 0.7)
    m.record_finish("abort", None)
    text = m.render()
    families: dict[str, str] = {}
    values: dict[str, float] = {}
    for line in text.splitlines():
        if line.startswith("# TYPE"):
            _, _, name, kind = line.split()
            families[name] = kind
        elif not line.startswith("#"):
            match = SAMPLE.match(line.replace('tiny \\"model\\"', "tiny"))
            assert match, line
            values[line.split("{")[0]] = float(line.rsplit(" ", 1)[1])
    assert families["vllm:num_requests_running"] == "gauge"
    assert families["vllm:time_to_first_token_seconds"] == "histogram"
    assert families["vllm:prompt_tokens_total"] == "counter"
    assert values["vllm:num_requests_running"] == 3 and values["vllm:kv_cache_usage_perc"] == 0.25
    assert values["vllm:prompt_tokens_total"] == 10 and values["vllm:generation_tokens_total"] == 3
    assert values["vllm:prefix_cache_hits_total"] == 40 and values["vllm:num_preemptions_total"] == 1
    assert values["vllm:inter_token_latency_seconds_count"] == 2
    assert values["vllm:e2e_request_latency_seconds_count"] == 1  # the aborted one has no E2E
    assert 'finished_reason="abort"} 1.0' in text and 'le="+Inf"} 2.0' in text
