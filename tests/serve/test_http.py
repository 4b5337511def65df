"""The server through real outside clients: the ``openai`` package and ``curl``; every kind of
bad request answered with an OpenAI error body and the server still serving; the API key, body
size and concurrency limits; ``/v1/models``, ``/health`` and ``/metrics``."""

from __future__ import annotations

import json
import shutil
import subprocess

import httpx
import pytest

from runtime import LLM, SamplingParams
from tests.serve.helpers import ENGINE_KWARGS, slow_steps, sse_events

GREEDY = dict(temperature=0, max_tokens=12, extra_body={"ignore_eos": True, "return_token_ids": True})


@pytest.fixture(scope="module")
def openai():
    return pytest.importorskip("openai")


@pytest.fixture(scope="module")
def client(server, openai):
    return openai.OpenAI(base_url=server.url + "/v1", api_key="unused", max_retries=0)


@pytest.fixture(scope="module")
def reference(chat_model_dir):
    """``LLM.generate`` on the same model and engine arguments: what the server must match."""
    llm = LLM(chat_model_dir, **ENGINE_KWARGS)
    yield llm
    llm.engine.close()


# --- the openai package ---------------------------------------------------------------------------

def test_openai_completions_match_llm_generate(client, reference):
    prompt = "Paris is the capital of"
    out = client.completions.create(model="tiny", prompt=prompt, **GREEDY)
    ref = reference.generate([prompt], SamplingParams(temperature=0, max_tokens=12, ignore_eos=True))[0]
    choice = out.choices[0]
    assert choice.token_ids == ref.token_ids  # vLLM's return_token_ids extension
    assert choice.text == ref.text and choice.finish_reason == "length"
    assert out.usage.prompt_tokens == len(ref.prompt_token_ids) and out.usage.completion_tokens == 12
    assert out.id.startswith("cmpl-") and out.model == "tiny" and out.object == "text_completion"

    chunks = list(client.completions.create(model="tiny", prompt=prompt, stream=True,
                                            stream_options={"include_usage": True}, **GREEDY))
    assert "".join(c.choices[0].text for c in chunks if c.choices) == ref.text
    assert [t for c in chunks if c.choices for t in c.choices[0].token_ids] == ref.token_ids
    assert [c.choices[0].finish_reason for c in chunks if c.choices][-1] == "length"
    assert chunks[-1].choices == [] and chunks[-1].usage.completion_tokens == 12
    assert len({c.id for c in chunks}) == 1


def test_openai_chat_streaming_and_not(client, reference):
    messages = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Où est la gare ?"}]
    out = client.chat.completions.create(model="tiny", messages=messages, **GREEDY)
    ref = reference.chat(messages, SamplingParams(temperature=0, max_tokens=12, ignore_eos=True))[0]
    assert out.choices[0].token_ids == ref.token_ids
    assert out.choices[0].message.role == "assistant" and out.choices[0].message.content == ref.text
    assert out.object == "chat.completion" and out.usage.total_tokens == len(ref.prompt_token_ids) + 12

    stream = client.chat.completions.create(model="tiny", messages=messages, stream=True, **GREEDY)
    chunks = list(stream)
    assert chunks[0].choices[0].delta.role == "assistant"
    assert "".join(c.choices[0].delta.content or "" for c in chunks) == ref.text
    assert chunks[-1].choices[0].finish_reason == "length"
    assert all(c.object == "chat.completion.chunk" for c in chunks)


def test_stop_strings_and_seeded_sampling(client):
    full = client.completions.create(model="tiny", prompt="abc", **GREEDY).choices[0].text
    at = next(i for i in range(1, len(full) - 1) if "\ufffd" not in full[i:i + 2])  # plain characters
    stop = full[at:at + 2]
    cut = client.completions.create(model="tiny", prompt="abc", stop=[stop], **GREEDY)
    assert cut.choices[0].text == full[:full.index(stop)] and cut.choices[0].finish_reason == "stop"
    streamed = client.completions.create(model="tiny", prompt="abc", stop=stop, stream=True, **GREEDY)
    assert "".join(c.choices[0].text for c in streamed) == full[:full.index(stop)]

    sampled = dict(temperature=1.0, top_p=0.9, seed=7, max_tokens=10, extra_body={"return_token_ids": True,
                                                                                   "ignore_eos": True, "top_k": 50})
    a = client.completions.create(model="tiny", prompt="abc", **sampled).choices[0].token_ids
    b = client.completions.create(model="tiny", prompt="abc", **sampled).choices[0].token_ids
    assert a == b and len(a) == 10


def test_models_health_and_metrics(client, server):
    models = client.models.list()
    assert [m.id for m in models.data] == ["tiny"]
    assert httpx.get(server.url + "/health").json()["status"] == "ok"
    client.completions.create(model="tiny", prompt="count me", max_tokens=3, temperature=0)
    text = httpx.get(server.url + "/metrics").text
    for name in ("vllm:num_requests_running", "vllm:num_requests_waiting", "vllm:gpu_cache_usage_perc",
                 "vllm:kv_cache_usage_perc", "vllm:prefix_cache_queries_total", "vllm:prefix_cache_hits_total",
                 "vllm:num_preemptions_total", "vllm:time_to_first_token_seconds_bucket",
                 "vllm:inter_token_latency_seconds_bucket", "vllm:time_per_output_token_seconds_bucket",
                 "vllm:e2e_request_latency_seconds_bucket", "vllm:prompt_tokens_total",
                 "vllm:generation_tokens_total", "vllm:request_success_total"):
        assert f"\n{name}{{" in text, name
    values = {line.split("{")[0]: float(line.rsplit(" ", 1)[1]) for line in text.splitlines()
              if line and not line.startswith("#") and "_bucket" not in line and "finished_reason" not in line}
    assert values["vllm:generation_tokens_total"] >= 3 and values["vllm:prompt_tokens_total"] >= 2
    assert values["vllm:time_to_first_token_seconds_count"] >= 1
    assert values["vllm:prefix_cache_queries_total"] >= values["vllm:prefix_cache_hits_total"]


def test_a_client_that_gives_up_frees_its_request(server):
    """A non-streamed request whose client times out is aborted like a dropped stream."""
    body = {"prompt": "slow", "max_tokens": 200, "ignore_eos": True}
    before = _aborted(server)
    with slow_steps(server, 0.02), pytest.raises(httpx.ReadTimeout):
        httpx.post(server.url + "/v1/completions", json=body, timeout=0.5)
    server.wait_idle()
    assert _aborted(server) == before + 1
    assert server.on_engine(lambda e: e.num_leaked_blocks()) == 0


def _aborted(server) -> float:
    line = next(ln for ln in httpx.get(server.url + "/metrics").text.splitlines()
                if 'finished_reason="abort"' in ln)
    return float(line.rsplit(" ", 1)[1])


# --- curl -----------------------------------------------------------------------------------------

CURL = shutil.which("curl")


@pytest.mark.skipif(CURL is None, reason="curl is not installed")
def test_curl_stream_and_error(server):
    body = json.dumps({"model": "tiny", "prompt": "hello", "max_tokens": 5, "temperature": 0, "stream": True,
                       "ignore_eos": True, "stream_options": {"include_usage": True}})
    out = subprocess.run([CURL, "-sS", "-N", "-H", "Content-Type: application/json", "-d", body,
                          server.url + "/v1/completions"], capture_output=True, text=True, timeout=60, check=True)
    events = list(sse_events(iter(out.stdout.splitlines())))
    assert events[-1]["usage"]["completion_tokens"] == 5
    assert [e["choices"][0]["finish_reason"] for e in events if e["choices"]][-1] == "length"

    bad = subprocess.run([CURL, "-sS", "-w", "\n%{http_code}", "-H", "Content-Type: application/json",
                          "-d", '{"prompt": "x", "max_tokens": -3}', server.url + "/v1/completions"],
                         capture_output=True, text=True, timeout=60, check=True)
    text, status = bad.stdout.rsplit("\n", 1)
    assert status == "400"
    assert json.loads(text)["error"]["param"] == "max_tokens"


# --- bad requests ---------------------------------------------------------------------------------

TOO_LONG = "x" * 300  # 300 byte tokens: more than max_model_len (256)
BAD = [
    ("/v1/completions", b'{"prompt": "hi", ', None),
    ("/v1/completions", b"\xff\xfe\x00", None),
    ("/v1/completions", b"[1, 2, 3]", None),
    ("/v1/completions", b"{}", "prompt"),
    ("/v1/completions", b'{"prompt": 42}', "prompt"),
    ("/v1/completions", b'{"prompt": "hi", "max_tokens": "16"}', "max_tokens"),
    ("/v1/completions", b'{"prompt": "hi", "temperature": "hot"}', "temperature"),
    ("/v1/completions", b'{"prompt": "hi", "stream": "yes"}', "stream"),
    ("/v1/completions", b'{"prompt": "hi", "seed": 1.5}', "seed"),
    ("/v1/completions", b'{"prompt": "hi", "stop": {"a": 1}}', "stop"),
    ("/v1/completions", b'{"prompt": "hi", "max_tokens": 0}', "max_tokens"),
    ("/v1/completions", b'{"prompt": "hi", "top_p": 1.5}', "top_p"),
    ("/v1/completions", b'{"prompt": "hi", "top_k": -2}', "top_k"),
    ("/v1/completions", b'{"prompt": "hi", "temperature": NaN}', "temperature"),
    ("/v1/completions", b'{"prompt": "hi", "n": 3}', "n"),
    ("/v1/completions", b'{"prompt": "hi", "echo": true}', "echo"),
    ("/v1/completions", b'{"prompt": "hi", "logprobs": 1}', "logprobs"),
    ("/v1/completions", b'{"prompt": ""}', "prompt"),
    ("/v1/completions", b'{"prompt": []}', "prompt"),
    ("/v1/completions", b'{"prompt": ["a", "b"]}', "prompt"),
    ("/v1/completions", b'{"prompt": [5, 100000]}', "prompt"),
    ("/v1/completions", b'{"prompt": [-1]}', "prompt"),
    ("/v1/completions", json.dumps({"prompt": TOO_LONG}).encode(), "prompt"),
    ("/v1/completions", b'{"prompt": "hi", "max_tokens": 255}', "max_tokens"),
    ("/v1/completions", b'{"prompt": "hi", "max_tokens": 99999}', "max_tokens"),
    ("/v1/chat/completions", b'{"messages": []}', "messages"),
    ("/v1/chat/completions", b'{"messages": "hi"}', "messages"),
    ("/v1/chat/completions", b'{"messages": [{"role": "wizard", "content": "hi"}]}', "messages"),
    ("/v1/chat/completions", b'{"messages": [{"role": "user", "content": 5}]}', "messages"),
    ("/v1/chat/completions",
     b'{"messages": [{"role": "user", "content": [{"type": "image_url", "image_url": {"url": "x"}}]}]}', "messages"),
    ("/v1/chat/completions", json.dumps({"messages": [{"role": "user", "content": TOO_LONG}]}).encode(),
     "messages"),
    ("/v1/chat/completions", b'{"messages": [{"role": "user", "content": "hi"}], "tools": [{"type": "x"}]}',
     "tools"),
]


def test_every_bad_request_is_a_400_and_the_server_keeps_serving(server):
    with httpx.Client(base_url=server.url, timeout=30) as http:
        for path, body, param in BAD:
            r = http.post(path, content=body, headers={"Content-Type": "application/json"})
            assert r.status_code == 400, (body, r.text)
            err = r.json()["error"]
            assert err["type"] == "invalid_request_error" and err["param"] == param, (body, err)
            assert isinstance(err["message"], str) and err["message"], body
        missing = http.post("/v1/completions", json={"model": "gpt-4", "prompt": "hi"})
        assert missing.status_code == 404 and missing.json()["error"]["code"] == "model_not_found"
        assert http.get("/v1/nothing").status_code == 404
        assert http.get("/v1/completions").status_code == 405
        ok = http.post("/v1/completions", json={"prompt": "still here", "max_tokens": 4, "temperature": 0})
        assert ok.status_code == 200 and ok.json()["usage"]["completion_tokens"] >= 1
        assert http.get("/health").status_code == 200
    server.wait_idle()
    assert server.on_engine(lambda e: e.num_leaked_blocks()) == 0


# --- the strict server: API key, body size, concurrency, no chat template ---------------------------

def test_api_key(strict_server, openai):
    url = strict_server.url
    body = {"prompt": "hi", "max_tokens": 2}
    for headers in ({}, {"Authorization": "Bearer wrong"}, {"Authorization": "sekret"}):
        r = httpx.post(url + "/v1/completions", json=body, headers=headers)
        assert r.status_code == 401 and r.json()["error"]["code"] == "invalid_api_key"
    assert httpx.get(url + "/v1/models").status_code == 401
    assert httpx.get(url + "/health").status_code == 200  # health and metrics stay open
    assert httpx.get(url + "/metrics").status_code == 200
    good = openai.OpenAI(base_url=url + "/v1", api_key="sekret", max_retries=0)
    assert good.completions.create(model="tiny", prompt="hi", max_tokens=2).usage.completion_tokens >= 1
    with pytest.raises(openai.AuthenticationError):
        openai.OpenAI(base_url=url + "/v1", api_key="nope", max_retries=0).models.list()


def test_body_size_and_chat_template_limits(strict_server):
    auth = {"Authorization": "Bearer sekret"}
    big = json.dumps({"prompt": "x" * 5000, "max_tokens": 2})
    r = httpx.post(strict_server.url + "/v1/completions", content=big, headers=auth)
    assert r.status_code == 413 and r.json()["error"]["code"] == "request_too_large"
    r = httpx.post(strict_server.url + "/v1/chat/completions", headers=auth,
                   json={"messages": [{"role": "user", "content": "hi"}]})
    assert r.status_code == 400 and "no chat template" in r.json()["error"]["message"]


def test_concurrency_limit(strict_server):
    """Two streams hold both slots; a third request gets 429 and gets in once one ends."""
    auth = {"Authorization": "Bearer sekret"}
    body = {"prompt": "hold", "max_tokens": 200, "stream": True, "ignore_eos": True, "temperature": 0}
    with httpx.Client(base_url=strict_server.url, headers=auth, timeout=60) as http, \
            slow_steps(strict_server, 0.01):
        with http.stream("POST", "/v1/completions", json=body) as s1, \
                http.stream("POST", "/v1/completions", json=body) as s2:
            assert s1.status_code == s2.status_code == 200
            r = http.post("/v1/completions", json={"prompt": "third", "max_tokens": 2})
            assert r.status_code == 429 and r.headers["retry-after"]
            assert r.json()["error"]["code"] == "too_many_requests"
            next(s1.iter_lines())
        # both streams closed early: their requests are aborted and the slots come back
        strict_server.wait_idle()
        assert http.post("/v1/completions", json={"prompt": "third", "max_tokens": 2}).status_code == 200
    assert strict_server.on_engine(lambda e: e.num_leaked_blocks()) == 0


def test_stream_interval_sends_the_first_token_then_chunks_of_n(chat_model_dir, openai):
    """``kvplan serve --stream-interval 4``: the first token alone, then four a chunk, the rest
    with the finish reason (vLLM's rule, and the simulator's ``chunk_times``); the text and token
    ids are the same as unstreamed, and the usage chunk still closes the stream. Steps are slowed
    so the reader keeps up (a lagging reader catches up in one larger chunk, as vLLM's does)."""
    from tests.serve.helpers import run_server

    with run_server(chat_model_dir, stream_interval=4) as s:
        client = openai.OpenAI(base_url=s.url + "/v1", api_key="unused", max_retries=0)
        whole = client.completions.create(model="tiny", prompt="chunk me", **{**GREEDY, "max_tokens": 10})
        with slow_steps(s, 0.1):
            chunks = list(client.completions.create(model="tiny", prompt="chunk me", stream=True,
                                                    stream_options={"include_usage": True},
                                                    **{**GREEDY, "max_tokens": 10}))
    body = [c for c in chunks if c.choices]
    assert [len(c.choices[0].token_ids) for c in body] == [1, 4, 4, 1]
    assert [t for c in body for t in c.choices[0].token_ids] == whole.choices[0].token_ids
    assert "".join(c.choices[0].text for c in body) == whole.choices[0].text
    assert body[-1].choices[0].finish_reason == "length" and chunks[-1].usage.completion_tokens == 10
