"""Issue 17, defect 10 (in part), through HTTP on SQLite and Postgres: a plan request that names
the cluster's whole GPU count is the same question as one that leaves num_gpus out, and gets the
same stored plan; a range of GPU counts is a different question."""

from __future__ import annotations

from conftest import unique_name


def _body(name: str, **extra: object) -> dict:
    model = {"name": name, "num_layers": 4, "hidden_size": 512, "num_attention_heads": 8, "vocab_size": 32000,
             "seq_length": 512}
    return {"model": model, "cluster": "dgx-a100-80gb-x1", "training": {"global_batch_size": 16, "seq_length": 512},
            "top_k": 1, **extra}


def test_naming_the_whole_cluster_is_the_same_request_as_leaving_num_gpus_out(api):
    name = unique_name("hash")
    first = api.post("/v1/plans", json=_body(name))
    assert first.status_code == 201, first.text
    assert first.json()["request"]["num_gpus"] == 8  # written out: every GPU of the cluster
    again = api.post("/v1/plans", json=_body(name, num_gpus=8))
    assert again.status_code == 200, again.text
    assert again.json()["id"] == first.json()["id"]


def test_fewer_gpus_or_a_range_of_counts_is_a_different_request(api):
    name = unique_name("hash")
    whole = api.post("/v1/plans", json=_body(name))
    assert whole.status_code == 201, whole.text
    fewer = api.post("/v1/plans", json=_body(name, num_gpus=4))
    ranged = api.post("/v1/plans", json=_body(name, constraints={"num_gpus": {"min": 1, "max": 8}}))
    assert fewer.status_code == ranged.status_code == 201, (fewer.text, ranged.text)
    assert len({whole.json()["id"], fewer.json()["id"], ranged.json()["id"]}) == 3
    assert "num_gpus" not in ranged.json()["request"]


def test_a_run_setting_spelled_out_at_its_default_is_the_same_request(api):
    """``launch_blocking: false``, ``moments_dtype: fp32`` and ``moe_act_input_dtype: half`` are
    what a request that leaves them out gets; the stored request leaves them unset too. Set to
    anything else, they are another question."""
    name = unique_name("hash")
    plain = api.post("/v1/plans", json=_body(name))
    assert plain.status_code == 201, plain.text
    training = {"global_batch_size": 16, "seq_length": 512}
    spelled = api.post("/v1/plans", json=_body(name, training={**training, "launch_blocking": False, "moments_dtype": "fp32",
                                                               "moe_act_input_dtype": "half"}))
    assert spelled.status_code == 200, spelled.text
    assert spelled.json()["id"] == plain.json()["id"]
    stored = spelled.json()["request"]["training"]
    assert all(stored.get(name) is None for name in ("launch_blocking", "moments_dtype", "moe_act_input_dtype")), stored
    blocking = api.post("/v1/plans", json=_body(name, training={**training, "launch_blocking": True}))
    assert blocking.status_code == 201, blocking.text
    assert blocking.json()["id"] != plain.json()["id"] and blocking.json()["request"]["training"]["launch_blocking"] is True
