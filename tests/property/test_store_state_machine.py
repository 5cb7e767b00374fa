"""A Hypothesis state machine: write, update (content and metadata), delete (guarded or not),
restore from the trash, rebuild, reopen and search (filtered or not) against a dict model."""
from __future__ import annotations

import json
import shutil
import tempfile
from dataclasses import dataclass, field, replace

from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import Bundle, RuleBasedStateMachine, invariant, rule

from convmem import ConvMemError, MemoryStore

WORDS = ["alpha", "beta", "gamma", "東京", "会議", "データ", "python", "設定"]
SESSIONS = ["s1", "s2", "s3"]
KINDS = ["conversation", "episode", "semantic"]
text = st.lists(st.sampled_from(WORDS), min_size=1, max_size=6).map(" ".join)
sessions = st.sampled_from(SESSIONS)
tags = st.lists(st.sampled_from(["p", "q", "r"]), max_size=2, unique=True)
kinds = st.sampled_from(KINDS)
importance = st.integers(0, 100)


@dataclass(frozen=True)
class Model:
    """What the store must hold for one live message."""

    session: str
    content: str
    tags: list[str] = field(default_factory=list)
    kind: str = "conversation"
    importance: int = 50
    revision: int = 1


class StoreMachine(RuleBasedStateMachine):
    ids = Bundle("ids")

    def __init__(self) -> None:
        super().__init__()
        self.dir = tempfile.mkdtemp(prefix="convmem-sm-")
        self.store = MemoryStore.open(self.dir)
        self.model: dict[str, Model] = {}  # live messages only
        self.order: list[str] = []  # write order
        self.trash: dict[str, Model] = {}  # deleted messages, in delete order, until a rebuild

    def teardown(self) -> None:
        self.store.close()
        shutil.rmtree(self.dir, ignore_errors=True)

    @rule(target=ids, session=sessions, content=text, tag_list=tags, kind=kinds, imp=importance)
    def write(self, session, content, tag_list, kind, imp):
        meta = json.dumps({"tags": tag_list, "memory_kind": kind, "importance": imp})
        m = self.store.write_message(session_id=session, role="user", content=content,
                                     metadata_json=meta)["message"]
        self.model[m["message_id"]] = Model(session, content, tag_list, kind, imp)
        self.order.append(m["message_id"])
        return m["message_id"]

    @rule(mid=ids, content=st.none() | text, tag_list=st.none() | tags, kind=st.none() | kinds)
    def update(self, mid, content, tag_list, kind):
        fields = {k: v for k, v in (("tags", tag_list), ("memory_kind", kind)) if v is not None}
        args = {"metadata_json": json.dumps(fields)} if fields else {}
        if content is None and not fields:
            content = "alpha"
        if content is not None:
            args["content"] = content
        if mid not in self.model:
            try:
                self.store.update_message(message_id=mid, **args)
                raise AssertionError("update of a deleted message succeeded")
            except ConvMemError as exc:
                assert exc.code == "NOT_FOUND"
            return
        old = self.model[mid]
        new = replace(old, content=content if content is not None else old.content,
                      tags=tag_list if tag_list is not None else old.tags,
                      kind=kind if kind is not None else old.kind)
        changed = new != old
        r = self.store.update_message(message_id=mid, expected_revision=old.revision, **args)
        assert r["changed"] is changed
        new = replace(new, revision=old.revision + changed)
        assert r["message"]["revision"] == new.revision
        self.model[mid] = new

    @rule(mid=ids, guard=st.none() | sessions)
    def delete(self, mid, guard):
        hit = mid in self.model and (guard is None or self.model[mid].session == guard)
        args = {} if guard is None else {"session_id": guard}
        assert self.store.delete_message(message_id=mid, **args)["status"] == (
            "OK" if hit else "NOT_FOUND")
        if hit:
            self.trash[mid] = self.model.pop(mid)

    @rule(mid=ids)
    def restore(self, mid):
        if mid not in self.trash:
            try:
                self.store.restore_message(message_id=mid)
                raise AssertionError("restore of a message not in the trash succeeded")
            except ConvMemError as exc:
                assert exc.code == ("VALIDATION_ERROR" if mid in self.model else "NOT_FOUND")
            return
        m = self.store.restore_message(message_id=mid)["message"]
        model = self.trash.pop(mid)
        model = replace(model, revision=model.revision + 1)
        assert (m["content"], m["revision"], m["metadata"]["tags"]) == (model.content, model.revision, model.tags)
        self.model[mid] = model

    @rule()
    def rebuild(self):
        r = self.store.rebuild_index()
        assert r["messages_indexed"] == len(self.model)
        self.trash.clear()  # gone for good

    @rule()
    def reopen(self):
        self.store.close()
        self.store = MemoryStore.open(self.dir)

    @rule(word=st.sampled_from(WORDS), session=st.none() | sessions,
          kind_filter=st.lists(kinds, max_size=2, unique=True),
          tag_filter=st.lists(st.sampled_from(["p", "q", "r"]), max_size=1),
          min_imp=st.sampled_from([0, 30, 70]))
    def search(self, word, session, kind_filter, tag_filter, min_imp):
        filters = {"kinds": kind_filter, "tags": tag_filter}
        r = self.store.search_messages(query=word, limit=100, filters_json=json.dumps(filters),
                                       min_importance=min_imp,
                                       **({"session_id": session} if session else {}))["results"]
        got = {x["message_id"] for x in r}
        want = {mid for mid, m in self.model.items()
                if word in m.content.split() and (session is None or m.session == session)
                and (not kind_filter or m.kind in kind_filter)
                and all(t in m.tags for t in tag_filter) and m.importance >= min_imp}
        assert got == want
        for x in r:
            assert x["content"] == self.model[x["message_id"]].content

    @invariant()
    def histories_match(self):
        for session in SESSIONS:
            got = self.store.read_messages(session_id=session, limit=1000)["history"]
            want = [mid for mid in self.order if mid in self.model and self.model[mid].session == session]
            assert [m["message_id"] for m in got] == want
            for m in got:
                model = self.model[m["message_id"]]
                assert (m["content"], m["revision"]) == (model.content, model.revision)
                meta = m["metadata"]
                assert (meta["tags"], meta["memory_kind"], meta["importance"]) == (
                    model.tags, model.kind, model.importance)

    @invariant()
    def trash_matches(self):
        listed = self.store.list_deleted(limit=1000)
        assert [e["message_id"] for e in listed["deleted"]] == list(self.trash)[::-1]
        assert [e["snippet"] for e in listed["deleted"]] == [m.content for m in self.trash.values()][::-1]

    @invariant()
    def health_counts(self):
        h = self.store.get_system_health()
        assert h["active_messages"] == len(self.model)
        assert h["session_count"] == len({m.session for m in self.model.values()})
        assert h["status"] == "OK"


StoreMachine.TestCase.settings = settings(
    max_examples=25, stateful_step_count=30, deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much])
TestStoreMachine = StoreMachine.TestCase
