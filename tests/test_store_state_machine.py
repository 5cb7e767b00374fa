"""A Hypothesis state machine: write, update, delete, rebuild, reopen and search against a dict model."""
from __future__ import annotations

import shutil
import tempfile

from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import Bundle, RuleBasedStateMachine, invariant, precondition, rule

from convmem import ConvMemError, MemoryStore

WORDS = ["alpha", "beta", "gamma", "東京", "会議", "データ", "python", "設定"]
text = st.lists(st.sampled_from(WORDS), min_size=1, max_size=6).map(" ".join)
sessions = st.sampled_from(["s1", "s2", "s3"])
tags = st.lists(st.sampled_from(["p", "q", "r"]), max_size=2, unique=True)


class StoreMachine(RuleBasedStateMachine):
    ids = Bundle("ids")

    def __init__(self) -> None:
        super().__init__()
        self.dir = tempfile.mkdtemp(prefix="convmem-sm-")
        self.store = MemoryStore.open(self.dir)
        # model: message id -> (session, content, tags, revision); deleted ids are removed
        self.model: dict[str, tuple[str, str, list[str], int]] = {}
        self.order: list[str] = []  # write order

    def teardown(self) -> None:
        self.store.close()
        shutil.rmtree(self.dir, ignore_errors=True)

    @rule(target=ids, session=sessions, content=text, tag_list=tags)
    def write(self, session, content, tag_list):
        m = self.store.write_message(session_id=session, role="user", content=content,
                                     metadata_json=f'{{"tags": {tag_list!r}}}'.replace("'", '"'))["message"]
        self.model[m["message_id"]] = (session, content, tag_list, 1)
        self.order.append(m["message_id"])
        return m["message_id"]

    @rule(mid=ids, content=text)
    def update(self, mid, content):
        if mid not in self.model:
            try:
                self.store.update_message(message_id=mid, content=content)
                raise AssertionError("update of a deleted message succeeded")
            except ConvMemError as exc:
                assert exc.code == "NOT_FOUND"
            return
        session, old, tag_list, rev = self.model[mid]
        r = self.store.update_message(message_id=mid, content=content, expected_revision=rev)
        assert r["changed"] is (content != old)
        new_rev = rev + 1 if content != old else rev
        assert r["message"]["revision"] == new_rev
        self.model[mid] = (session, content, tag_list, new_rev)

    @rule(mid=ids)
    def delete(self, mid):
        expected = "OK" if mid in self.model else "NOT_FOUND"
        assert self.store.delete_message(message_id=mid)["status"] == expected
        self.model.pop(mid, None)

    @rule()
    def rebuild(self):
        r = self.store.rebuild_index()
        assert r["messages_indexed"] == len(self.model)

    @rule()
    def reopen(self):
        self.store.close()
        self.store = MemoryStore.open(self.dir)

    @rule(word=st.sampled_from(WORDS), session=st.none() | sessions)
    def search(self, word, session):
        r = self.store.search_messages(query=word, limit=100,
                                       **({"session_id": session} if session else {}))["results"]
        got = {x["message_id"] for x in r}
        want = {mid for mid, (s, c, t, _) in self.model.items()
                if word in c.split() and (session is None or s == session)}
        assert got == want
        for x in r:
            assert x["content"] == self.model[x["message_id"]][1]

    @invariant()
    def histories_match(self):
        for session in ("s1", "s2", "s3"):
            got = [m["message_id"] for m in
                   self.store.read_messages(session_id=session, limit=1000)["history"]]
            want = [mid for mid in self.order if mid in self.model and self.model[mid][0] == session]
            assert got == want

    @invariant()
    def health_counts(self):
        h = self.store.get_system_health()
        assert h["active_messages"] == len(self.model)
        assert h["session_count"] == len({s for s, *_ in self.model.values()})
        assert h["status"] == "OK"


StoreMachine.TestCase.settings = settings(
    max_examples=25, stateful_step_count=30, deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much])
TestStoreMachine = StoreMachine.TestCase
