from __future__ import annotations

import pytest

from mnemo_client import Mnemo, MnemoError, models


def test_task_lifecycle(mnemo: Mnemo, other: Mnemo, uid: str) -> None:
    task = mnemo.tasks.register(
        f"ship {uid}", plan=["build", "test", "publish"], metadata={"run": uid}
    )
    assert isinstance(task, models.TaskDetail)
    assert isinstance(task.plan, models.Plan) and isinstance(task.counts, models.Counts)
    assert [i.title for i in task.plan.items] == ["build", "test", "publish"]
    tid = task.id

    item = mnemo.tasks.set_item_status(tid, 1, "completed")
    assert isinstance(item, models.PlanItem) and item.status == "completed"
    updated = mnemo.tasks.update(tid, message=f"build done, ostrich{uid}", query="where was I?")
    assert isinstance(updated, models.UpdateResult)
    assert isinstance(updated.digest, models.Digest)
    answer = mnemo.tasks.query(tid, "what is next?")
    assert isinstance(answer, models.QueryAnswer)
    assert answer.digest.next.title == "test"  # type: ignore[union-attr]
    assert [d.title for d in answer.digest.completed] == ["build"]

    got = mnemo.tasks.get(tid)
    assert got.id == tid and got.counts.messages >= 1
    patched = mnemo.tasks.patch(tid, phase="EXECUTING_PLAN", name=f"ship it {uid}")
    assert patched.name == f"ship it {uid}" and patched.phase == "EXECUTING_PLAN"

    plan = mnemo.tasks.put_plan(tid, ["test", "publish", "announce"], reason="one more")
    assert isinstance(plan, models.Plan) and plan.version == 2
    versions = mnemo.tasks.plans(tid)
    assert [v.version for v in versions.versions] == [1, 2]
    assert [i.title for i in mnemo.tasks.plan(tid, 1).items] == ["build", "test", "publish"]

    found = list(mnemo.tasks.search(f"ostrich{uid}", task_id=tid))
    assert found and all(isinstance(h, models.TaskSearchHit) for h in found)
    assert {h.task_id for h in mnemo.tasks.search(f"ostrich{uid}")} == {tid}
    assert list(other.tasks.search(f"ostrich{uid}")) == []
    with pytest.raises(MnemoError) as e:
        other.tasks.get(tid)
    assert e.value.status == 404

    listed = [t.id for t in mnemo.tasks.list(page_size=1)]
    assert tid in listed
    assert isinstance(mnemo.tasks.list_page(limit=1), models.TaskPage)

    mnemo.tasks.delete(tid)
    with pytest.raises(MnemoError) as e:
        mnemo.tasks.get(tid)
    assert e.value.status == 404


def test_task_workspace(mnemo: Mnemo, uid: str) -> None:
    tid = mnemo.tasks.register(f"workspace {uid}", plan=["run"]).id

    action = mnemo.tasks.add_action(
        tid, 1, "cli", "ran make", status="started", input_data={"cmd": "make"}
    )
    assert isinstance(action, models.Action) and action.status == "started"
    done = mnemo.tasks.patch_action(tid, action.id, status="completed", output_data={"rc": 0})
    assert done.status == "completed"
    assert [a.id for a in mnemo.tasks.actions(tid, 1)] == [action.id]
    for i in range(3):
        mnemo.tasks.add_action_log(tid, action.id, "stdout", f"line {i}")
    logs = list(mnemo.tasks.action_logs(tid, action.id, page_size=2))
    assert [entry.content for entry in logs] == ["line 0", "line 1", "line 2"]

    appended = mnemo.tasks.add_events(
        tid,
        [
            {"step_narrative": f"step {i}", "status": "COMPLETED", "tool_name": "sh"}
            for i in range(5)
        ],
    )
    assert isinstance(appended, models.Appended) and appended.count == 5
    events = list(mnemo.tasks.events(tid, page_size=2))
    assert [e.step_narrative for e in events] == [f"step {i}" for i in range(5)]
    assert list(mnemo.tasks.events(tid, tool_name="nothing")) == []

    message = mnemo.tasks.add_message(tid, "note to self", role="agent", msg_type="text")
    assert isinstance(message, models.TaskMessage)
    assert "note to self" in [m.content for m in mnemo.tasks.messages(tid, page_size=1)]

    snap = mnemo.tasks.add_snapshot(tid, "ctx", "the context so far")
    assert isinstance(snap, models.Snapshot)
    assert [s.label for s in mnemo.tasks.snapshots(tid)] == ["ctx"]

    for i in range(3):
        step = mnemo.tasks.append_step(tid, "coder", [{"type": "text", "text": f"thought {i}"}])
        assert isinstance(step, models.Step)
    assert len(list(mnemo.tasks.steps(tid, page_size=2))) == 3
    assert len(mnemo.tasks.steps_page(tid, recent=2).items) == 2

    data = bytes(range(256)) * 20
    artifact = mnemo.tasks.upload_artifact(tid, data, name="blob.bin")
    assert isinstance(artifact, models.Artifact) and artifact.size == len(data)
    assert mnemo.tasks.read_artifact(tid, artifact.artifact_id) == data
    assert mnemo.tasks.read_artifact(tid, artifact.artifact_id, start=10, end=19) == data[10:20]
    assert [a.artifact_id for a in mnemo.tasks.artifacts(tid)] == [artifact.artifact_id]
    mnemo.tasks.delete_artifact(tid, artifact.artifact_id)
    assert list(mnemo.tasks.artifacts(tid)) == []

    config = mnemo.tasks.put_config(tid, {"agents": ["coder"]})
    assert isinstance(config, models.TaskConfigSnapshot)
    assert mnemo.tasks.get_config(tid).config == {"agents": ["coder"]}

    wait = mnemo.tasks.create_wait(tid, "url", "https://example.test", "status is 200")
    assert isinstance(wait, models.Wait) and wait.status == "watching"
    assert mnemo.tasks.get_wait(tid, wait.wait_id).criteria == "status is 200"
    resolved = mnemo.tasks.resolve_wait(tid, wait.wait_id, "resolved", result_message="up")
    assert resolved.status == "resolved"
    assert [w.wait_id for w in mnemo.tasks.waits(tid)] == [wait.wait_id]

    archive = mnemo.tasks.export(tid)
    assert archive[:2] == b"\x1f\x8b"
    imported = mnemo.tasks.import_archive(archive)
    assert isinstance(imported, models.ImportResult)
    assert imported.source_task_id == tid and imported.task_id != tid
    assert imported.events == 5
