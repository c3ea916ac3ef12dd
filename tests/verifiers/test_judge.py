"""The judge verifier: a real tiny reward model and a real HTTP endpoint through ``openai``.

The reward model is a Qwen2 sequence-classification model built from a config (random weights,
the tiny tokenizer); the LLM judge talks to a local HTTP server that answers chat completions
the way an OpenAI-compatible server does (its replies are scripted per test).
"""

from __future__ import annotations

import json
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
import torch

from rlvr.verifiers.errors import InvalidArgumentError
from rlvr.verifiers.judge import (
    JudgeError,
    JudgeItem,
    JudgeVerifier,
    OpenAIJudge,
    RewardModelJudge,
    parse_score,
)


def build_reward_model(tokenizer_dir, out, num_labels: int = 1):
    """A tiny Qwen2ForSequenceClassification with the tiny tokenizer, saved to ``out``."""
    from transformers import AutoTokenizer, Qwen2Config, Qwen2ForSequenceClassification

    tok = AutoTokenizer.from_pretrained(tokenizer_dir)
    torch.manual_seed(0)
    config = Qwen2Config(vocab_size=len(tok), hidden_size=32, intermediate_size=64,
                         num_hidden_layers=1, num_attention_heads=2, num_key_value_heads=1,
                         num_labels=num_labels, pad_token_id=tok.pad_token_id)
    Qwen2ForSequenceClassification(config).save_pretrained(out)
    tok.save_pretrained(out)
    return out


@pytest.fixture(scope="module")
def reward_model(tiny_model_path, tmp_path_factory):
    return build_reward_model(tiny_model_path, tmp_path_factory.mktemp("rm"))


ITEMS = [JudgeItem("1+2=", "3"), JudgeItem("10+5=", "15 is the answer"), JudgeItem("4+4=", "")]


def test_reward_model_scores_a_batch_like_one_at_a_time(reward_model):
    judge = RewardModelJudge(reward_model)
    batch = judge.score_batch(ITEMS)
    alone = [judge.score_batch([item])[0] for item in ITEMS]
    assert all(0.0 <= s <= 1.0 for s in batch)
    assert batch == pytest.approx(alone, abs=1e-5)  # padding does not change a score
    assert len(set(batch)) == 3  # the text matters


def test_reward_model_with_two_labels_uses_the_label_probability(reward_model, tmp_path,
                                                                tiny_model_path):
    two = build_reward_model(tiny_model_path, tmp_path / "two", num_labels=2)
    good, bad = RewardModelJudge(two, label=1), RewardModelJudge(two, label=0)
    for g, b in zip(good.score_batch(ITEMS), bad.score_batch(ITEMS), strict=True):
        assert g + b == pytest.approx(1.0, abs=1e-6)
    with pytest.raises(InvalidArgumentError, match=r"label must be in \[0, 2\); got 2"):
        RewardModelJudge(two, label=2)
    with pytest.raises(InvalidArgumentError, match="does not exist"):
        RewardModelJudge(tmp_path / "nowhere")


def test_verifier_batches_concurrent_calls_into_one_forward(reward_model):
    judge = RewardModelJudge(reward_model)
    verifier = JudgeVerifier(judge, max_batch=8, max_wait_s=0.5, threshold=0.5)
    tasks = [{"question": f"{i}+1=", "answer": str(i + 1)} for i in range(8)]
    with ThreadPoolExecutor(8) as pool:
        verdicts = list(pool.map(lambda t: verifier(t["answer"], t), tasks))
    verifier.close()
    assert verifier.batches == 1  # eight episodes, one forward
    want = judge.score_batch([JudgeItem(t["question"], t["answer"]) for t in tasks])
    assert [v.score for v in verdicts] == pytest.approx(want, abs=1e-5)
    for v in verdicts:
        assert v.passed == (v.score >= 0.5)
        assert v.reason == ("correct" if v.passed else "wrong_answer")
        assert v.details["judge_score"] == v.score


class Broken:
    """A judge that fails the way a crashed reward-model worker does."""

    def score_batch(self, items):
        raise RuntimeError("CUDA error: device-side assert triggered")


class Slow:
    def score_batch(self, items):
        time.sleep(0.6)
        return [1.0] * len(items)


class Wrong:
    def __init__(self, scores):
        self.scores = scores

    def score_batch(self, items):
        return self.scores


@pytest.mark.parametrize(("judge", "message"), [
    (Broken(), r"the judge failed: RuntimeError: CUDA error"),
    (Slow(), r"the judge did not answer within 0.2 s"),
    (Wrong([0.5, 0.5]), r"the judge returned 2 scores for 1 items"),
    (Wrong([1.5]), r"the judge returned 1.5, not a score in \[0, 1\]"),
    (Wrong([float("nan")]), r"the judge returned nan"),
])
def test_a_failing_judge_raises_judge_error(judge, message):
    verifier = JudgeVerifier(judge, timeout_s=0.2, max_wait_s=0.0)
    with pytest.raises(JudgeError, match=message):
        verifier("3", {"question": "1+2="})
    verifier.close()


def test_bad_arguments_are_refused():
    with pytest.raises(InvalidArgumentError, match=r"threshold must be in \[0, 1\]; got 2"):
        JudgeVerifier(Wrong([1.0]), threshold=2)
    verifier = JudgeVerifier(Wrong([1.0]))
    with pytest.raises(InvalidArgumentError, match=r"no 'question' field .* \['prompt'\]"):
        verifier("3", {"prompt": "1+2="})
    verifier.close()
    with pytest.raises(JudgeError, match="closed"):
        verifier("3", {"question": "1+2="})


@pytest.mark.parametrize(("reply", "score"), [
    ("SCORE: 1", 1.0), ("The answer is right.\nscore: 0.75", 0.75), ("SCORE=0\nSCORE: 0.5", 0.5),
])
def test_parse_score(reply, score):
    assert parse_score(reply) == score


@pytest.mark.parametrize("reply", ["looks good", "SCORE: 7", "SCORE: -0.1", ""])
def test_parse_score_refuses(reply):
    with pytest.raises(JudgeError):
        parse_score(reply)


# ----------------------------------------------------------------------------- over HTTP
class ChatServer:
    """A local HTTP server answering ``POST /v1/chat/completions`` as an OpenAI-compatible one.

    ``reply(prompt) -> (status, content, delay_s)`` decides each answer; requests are recorded.
    """

    def __init__(self, reply):
        server = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self):  # noqa: N802  (http.server's name)
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                server.requests.append(body)
                status, content, delay = reply(body["messages"][-1]["content"])
                time.sleep(delay)
                payload = {"id": "x", "object": "chat.completion", "created": 0,
                           "model": body["model"],
                           "choices": [{"index": 0, "finish_reason": "stop",
                                        "message": {"role": "assistant", "content": content}}]}
                if status != 200:
                    payload = {"error": {"message": content, "type": "server_error"}}
                data = json.dumps(payload).encode()
                try:
                    self.send_response(status)
                    self.send_header("Content-Type", "application/json")
                    self.send_header("Content-Length", str(len(data)))
                    self.end_headers()
                    self.wfile.write(data)
                except (BrokenPipeError, ConnectionResetError):  # the client gave up
                    pass

            def log_message(self, *args):
                pass

        self.requests: list[dict] = []
        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)
        self.thread.start()
        self.url = f"http://127.0.0.1:{self.httpd.server_port}/v1"

    def close(self):
        self.httpd.shutdown()
        self.httpd.server_close()


def grade(prompt: str):
    """Scores 1 when the answer to grade is the reference, 0 otherwise; 500 on 'boom'."""
    answer = prompt.split("Answer to grade:\n")[1].split("\n")[0]
    reference = prompt.split("Reference answer:\n")[1].split("\n")[0]
    if answer == "boom":
        return 500, "internal error", 0.0
    if answer == "slow":
        return 200, "SCORE: 1", 1.0
    if answer == "chatty":
        return 200, "I think it is fine.", 0.0
    return 200, f"SCORE: {1 if answer == reference else 0}", 0.0


@pytest.fixture
def chat_server():
    server = ChatServer(grade)
    yield server
    server.close()


def test_openai_judge_over_http(chat_server):
    judge = OpenAIJudge(chat_server.url, "judge-model", timeout_s=5)
    verifier = JudgeVerifier(judge, reference_field="answer", max_wait_s=0.2)
    tasks = [{"question": f"{i}+1=", "answer": str(i + 1)} for i in range(4)]
    responses = ["1", "3", "3", "5"]
    with ThreadPoolExecutor(4) as pool:
        verdicts = list(pool.map(verifier, responses, tasks))
    assert [v.score for v in verdicts] == [1.0, 0.0, 1.0, 0.0]
    assert [v.passed for v in verdicts] == [True, False, True, False]
    assert len(chat_server.requests) == 4
    assert chat_server.requests[0]["model"] == "judge-model"
    assert chat_server.requests[0]["temperature"] == 0.0
    verifier.close()
    judge.close()


@pytest.mark.parametrize(("answer", "message"), [
    ("boom", r"the judge failed: InternalServerError"),
    ("chatty", r"the judge's reply has no 'SCORE: x': 'I think it is fine.'"),
    ("slow", r"the judge failed: APITimeoutError"),
])
def test_openai_judge_failures_raise_judge_error(chat_server, answer, message):
    judge = OpenAIJudge(chat_server.url, "judge-model", timeout_s=0.3)
    verifier = JudgeVerifier(judge, reference_field="answer", timeout_s=10)
    with pytest.raises(JudgeError, match=message):
        verifier(answer, {"question": "1+2=", "answer": "3"})
    verifier.close()
    judge.close()


def test_unreachable_endpoint_raises_judge_error():
    judge = OpenAIJudge("http://127.0.0.1:9/v1", "m", timeout_s=1)
    verifier = JudgeVerifier(judge)
    with pytest.raises(JudgeError, match="APIConnectionError"):
        verifier("3", {"question": "1+2="})
    verifier.close()
    judge.close()
