"""Model entries from Hugging Face config.json files (catalog/hf_config.py).

The published configs (tests/data/hf_configs, each with its Hub repository) are converted and
checked field by field against the catalog entries that cite the same releases, and through the
solver's parameter counts against the totals their authors publish. A config the planner cannot
represent is an error naming the config's field, over HTTP a 422."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

import catalog
from catalog.hf_config import SUPPORTED_MODEL_TYPES, from_hf_config
from conftest import assert_problem, unique_name
from solver.cost.flops import active_parameter_count, embedding_parameter_count, total_parameter_count
from solver.spec.errors import SpecError

CONFIGS = Path(__file__).parent / "data" / "hf_configs"


def _config(name: str) -> dict:
    return json.loads((CONFIGS / f"{name}.json").read_text())


def _entry(name: str) -> dict:
    return {k: v for k, v in catalog.get_entry("models", name).items() if k not in ("display_name", "source", "builtin")}


# Catalog entries whose shape comes from the same release as the config, and the fields in which
# the catalog states the pre-training context (or the training code's vocabulary) rather than the
# config's longest position.
SAME_RELEASE = [
    ("llama3-8b", "llama3-8b", {}),
    ("mixtral-8x7b", "mixtral-8x7b", {}),
    ("mixtral-8x22b", "mixtral-8x22b", {}),
    ("deepseek-v3", "deepseek-v3", {"seq_length": 4096}),  # pre-training at 4K (report Sec 4.1)
    ("qwen1.5-moe-a2.7b", "qwen1.5-moe-a2.7b", {}),
    ("llama4-scout", "llama4-scout", {"seq_length": 8192}),  # the catalog's assumed pre-training length
    ("gpt-neox-20b", "gpt-neox-20b", {}),
    ("gpt2-xl", "gpt2-xl", {}),
    ("bert-large", "bert-large", {}),
    ("gpt-j-6b", "gpt-j-6b", {}),
    ("qwen3-30b-a3b", "qwen3-30b-a3b", {"seq_length": 4096}),  # pre-training at 4K (Qwen3 report Sec 3)
    ("qwen3-235b-a22b", "qwen3-235b-a22b", {"seq_length": 4096}),
]


@pytest.mark.parametrize(("config", "entry", "overrides"), SAME_RELEASE)
def test_a_published_config_converts_to_the_catalog_entry_of_the_same_release(config, entry, overrides):
    converted = from_hf_config(_config(config), name=entry, **overrides)
    assert converted.fields == _entry(entry)


def test_mpt_7b_converts_with_the_vocabulary_its_config_states():
    """MPT-7B's config.json pads the vocabulary to 50432 where llm-foundry's training yaml (the
    catalog's source) states 50368; every other field agrees, ALiBi leaves no position table."""
    fields = from_hf_config(_config("mpt-7b"), name="mpt-7b").fields
    assert fields == {**_entry("mpt-7b"), "vocab_size": 50432}
    assert fields["position_embedding"] == "none"


def test_moe_parameter_counts_match_what_their_authors_publish():
    """DeepSeek-V3 671B total / 37B active (report Sec 4.2), Mixtral 8x7B 46.7B / 12.9B (Jiang et
    al. 2024 Sec 2), Qwen1.5-MoE-A2.7B 14.3B / 2.7B (Qwen blog), Qwen3-235B-A22B 235B / 22B (model
    card), from the converted configs."""
    for name, total_b, active_b in (("deepseek-v3", 671, 37), ("mixtral-8x7b", 46.7, 12.9), ("qwen1.5-moe-a2.7b", 14.3, 2.7),
                                    ("qwen3-235b-a22b", 235, 22)):
        model = catalog.model_spec_from_dict(from_hf_config(_config(name), name=name).fields)
        assert total_parameter_count(model) / 1e9 == pytest.approx(total_b, rel=0.01), name
        assert active_parameter_count(model) / 1e9 == pytest.approx(active_b, rel=0.03), name


def test_what_the_planner_does_not_cost_is_listed():
    notes = from_hf_config(_config("llama4-scout"), name="scout").not_modelled
    assert any("chunked attention" in n for n in notes) and any("vision encoder" in n for n in notes)
    assert any("biases" in n for n in from_hf_config(_config("qwen1.5-moe-a2.7b"), name="q").not_modelled)
    assert from_hf_config(_config("llama3-8b"), name="l").not_modelled == ()
    # DeepSeek-V3's group-limited routing (n_group 8, topk_group 4) is read, not listed; GLM-4.7's
    # single group is no limit.
    deepseek = from_hf_config(_config("deepseek-v3"), name="d")
    assert deepseek.not_modelled == ()
    assert (deepseek.fields["router_groups"], deepseek.fields["router_group_topk"]) == (8, 4)
    assert "router_groups" not in from_hf_config(_config("glm-4.7"), name="g").fields


def test_heads_wider_than_hidden_over_heads_keep_their_width():
    """Qwen3-30B-A3B gives 32 heads of 128 on hidden 2048: the spec keeps head_dim 128, and the
    parameter counts come out as the model card states them (30.5B total, 3.3B activated)."""
    fields = from_hf_config(_config("qwen3-30b-a3b"), name="qwen3").fields
    assert (fields["head_dim"], fields["num_attention_heads"], fields["hidden_size"]) == (128, 32, 2048)
    model = catalog.model_spec_from_dict(fields)
    assert total_parameter_count(model) / 1e9 == pytest.approx(30.5, rel=0.01)
    assert active_parameter_count(model) / 1e9 == pytest.approx(3.3, rel=0.02)
    assert "head_dim" not in from_hf_config(_config("llama4-scout"), name="s").fields  # 40 x 128 = 5120: the default


@pytest.mark.parametrize(
    ("change", "field", "reason"),
    [
        ({"model_type": "my_arch"}, "config.model_type", "'my_arch' is not a model type this reader knows"),
        ({"num_hidden_layers": None}, "config.num_hidden_layers", "is required"),
        ({"num_hidden_layers": "32"}, "config.num_hidden_layers", "must be an integer >= 1"),
        ({"num_key_value_heads": 0}, "config.num_key_value_heads", "must be an integer >= 1"),
        ({"tie_word_embeddings": "no"}, "config.tie_word_embeddings", "must be true or false"),
        ({"num_key_value_heads": 5}, "config.num_key_value_heads", "is not a multiple of num_kv_heads=5"),  # ModelSpec's GQA rule, under the config's name
    ],
)
def test_a_bad_config_names_the_config_field(change, field, reason):
    config = {**_config("llama3-8b"), **change}
    with pytest.raises(SpecError) as caught:
        from_hf_config(config, name="bad")
    assert caught.value.field == field
    assert reason in caught.value.reason


def test_layouts_the_catalog_cannot_express_are_refused():
    qwen = {**_config("qwen1.5-moe-a2.7b"), "mlp_only_layers": [0, 5]}
    with pytest.raises(SpecError, match="dense layers at listed positions"):
        from_hf_config(qwen, name="q")
    scout = _config("llama4-scout")
    scout["text_config"] = {**scout["text_config"], "moe_layers": [1, 3]}
    with pytest.raises(SpecError) as caught:
        from_hf_config(scout, name="s")
    assert caught.value.field == "config.text_config.moe_layers"
    shared = {**_config("qwen1.5-moe-a2.7b"), "shared_expert_intermediate_size": 5000}
    with pytest.raises(SpecError, match="not a whole number of experts"):
        from_hf_config(shared, name="q")


def test_maverick_style_interleaving_is_every_second_layer():
    """interleave_moe_layer_step 2 (Llama 4 Maverick): Transformers makes layers 1, 3, ... sparse,
    the catalog's moe_layer_interval 2."""
    scout = _config("llama4-scout")
    text = {**scout["text_config"], "interleave_moe_layer_step": 2}
    text.pop("moe_layers")
    fields = from_hf_config({**scout, "text_config": text}, name="m").fields
    assert fields["moe_layer_interval"] == 2 and fields["num_shared_experts"] == 1


@pytest.mark.parametrize(("model_type", "lacks"), [
    ("qwen3_next", "linear-attention"), ("nemotron_h", "state-space"), ("mamba", "state-space"), ("t5", "encoder-decoder"),
])
def test_a_known_type_the_cost_model_cannot_cost_says_what_it_lacks(model_type, lacks):
    with pytest.raises(SpecError) as caught:
        from_hf_config({"model_type": model_type, "num_hidden_layers": 48}, name="x")
    assert caught.value.field == "config.model_type"
    assert lacks in caught.value.reason and "llama" in caught.value.reason


def test_every_supported_type_is_named_in_the_refusal():
    with pytest.raises(SpecError) as caught:
        from_hf_config({"model_type": None}, name="x")
    for kind in SUPPORTED_MODEL_TYPES:
        assert kind in caught.value.reason


# ---------------------------------------------------------------------------------------- HTTP


def test_the_api_converts_a_config_and_the_model_plans_as_the_catalog_entry_does(api):
    name = unique_name("my-llama")
    reply = api.post("/v1/catalog/models/from-hf-config", json={"name": name, "config": _config("llama3-8b")})
    assert reply.status_code == 200, reply.text
    body = reply.json()
    assert body["model"] == {**_entry("llama3-8b"), "name": name}
    assert body["model_type"] == "llama" and body["not_modelled"] == []
    request = {
        "cluster": "dgx-h100-x1", "training": {"global_batch_size": 64, "seq_length": 8192},
        "parallel": {"dp_size": 8, "tp_size": 1, "pp_size": 1, "zero_stage": 3, "micro_batch_size": 1, "recompute": "full"},
    }
    inline = api.post("/v1/evaluations", json={**request, "model": body["model"]})
    named = api.post("/v1/evaluations", json={**request, "model": "llama3-8b"})
    assert inline.status_code == 200, inline.text
    assert inline.json()["prediction"]["step_time_s"] == named.json()["prediction"]["step_time_s"]
    stored = api.post("/v1/catalog/models", json=body["model"])  # the converted body is a catalog model as it is
    assert stored.status_code == 201, stored.text


def test_the_api_refuses_a_config_it_cannot_represent_with_a_422_naming_the_field(api):
    scattered = {**_config("qwen3-30b-a3b"), "mlp_only_layers": [0, 7]}
    problem = assert_problem(api.post("/v1/catalog/models/from-hf-config", json={"name": "qwen3", "config": scattered}), 422)
    assert problem["errors"][0]["field"] == "body.config.mlp_only_layers"
    missing = assert_problem(api.post("/v1/catalog/models/from-hf-config", json={"name": "x", "config": {"model_type": "llama"}}), 422)
    assert missing["errors"][0]["field"] == "body.config.num_hidden_layers"
    unnamed = assert_problem(api.post("/v1/catalog/models/from-hf-config", json={"config": _config("llama3-8b")}), 422)
    assert unnamed["errors"][0]["field"] == "body.name"


def test_sizes_past_the_apis_bounds_are_a_422_under_the_configs_name(api):
    """A config the reader takes but the API bounds refuse (more than 1024 layers) is named by its
    config key, not by the ModelSpec field it would have filled."""
    config = {**_config("llama3-8b"), "num_hidden_layers": 5000}
    problem = assert_problem(api.post("/v1/catalog/models/from-hf-config", json={"name": "deep", "config": config}), 422)
    assert problem["errors"][0]["field"] == "body.config.num_hidden_layers"


# ---------------------------------------------------------------------------------------- CLI


def test_the_cli_prints_the_model_a_plan_body_takes_inline():
    from test_cli import run

    code, out, _ = run(["hf-config", str(CONFIGS / "deepseek-v3.json"), "--name", "dsv3", "--seq-length", "4096"])
    assert code == 0
    assert json.loads(out)["model"] == {**_entry("deepseek-v3"), "name": "dsv3"}
    code, out, _ = run(["evaluate", "-"], stdin=json.dumps({
        "model": json.loads(out)["model"], "cluster": "hgx-h800-x256",
        "training": {"global_batch_size": 1920, "seq_length": 4096},
        "parallel": {"dp_size": 128, "pp_size": 16, "ep_size": 64, "zero_stage": 1, "micro_batch_size": 1, "recompute": "selective"},
    }))
    assert code == 0 and json.loads(out)["prediction"]["step_time_s"] > 0


def test_the_cli_reports_a_config_it_cannot_read_as_a_problem():
    from test_cli import run

    code, out, err = run(["hf-config", "-", "--name", "q"], stdin=json.dumps({**_config("llama3-8b"), "model_type": "mamba"}))
    assert (code, out) == (2, "")
    assert json.loads(err)["errors"][0]["field"] == "body.config.model_type"
    code, _, err = run(["hf-config", "-", "--name", "q"], stdin="{not json")
    assert code == 2 and json.loads(err)["errors"][0]["field"] == "config"


def test_gemma_and_gpt_oss_keep_their_head_width_and_counts():
    """Gemma 2 9B (google/gemma-2-9b: 16 heads of 256 on hidden 3584, GeGLU, tied) counts 9.24B
    parameters as its model card; gpt-oss-120b (openai/gpt-oss-120b: 64 heads of 64 on hidden 2880,
    128 experts, top 4) 116.8B total and 5.13B active once the input embedding, a lookup, is left
    out as its model card counts active parameters. Their alternating sliding windows are costed
    (tests/test_sliding_window.py): a window and the share of layers it covers."""
    gemma = from_hf_config(_config("gemma2-9b"), name="gemma2-9b")
    model = catalog.model_spec_from_dict(gemma.fields)
    assert (model.head_dim, model.q_width, model.tied_embeddings, model.mlp_activation.value) == (256, 4096, True, "swiglu")
    assert total_parameter_count(model) / 1e9 == pytest.approx(9.24, abs=0.01)
    assert (gemma.fields["sliding_window"], gemma.fields["sliding_window_fraction"]) == (4096, 0.5)
    oss = from_hf_config(_config("gpt-oss-120b"), name="gpt-oss-120b")
    model = catalog.model_spec_from_dict(oss.fields)
    assert (model.head_dim, model.num_experts, model.experts_per_token) == (64, 128, 4)
    assert total_parameter_count(model) / 1e9 == pytest.approx(116.8, abs=0.1)
    assert (active_parameter_count(model) - embedding_parameter_count(model)) / 1e9 == pytest.approx(5.13, abs=0.01)
    assert not any("sliding-window" in n for n in oss.not_modelled)
    wrapped = from_hf_config({"model_type": "gemma3", "text_config": {**_config("gemma2-9b"), "model_type": "gemma3_text"}}, name="g3")
    assert wrapped.fields == {**gemma.fields, "name": "g3"}


def test_glm_olmoe_and_olmo2_configs_read_as_their_authors_describe_them():
    """GLM-4.7 (zai-org, the GLM-4.5 architecture: GLM-4.5 report, arXiv 2508.06471, Table 1: 355B
    total, 32B activated, 3 dense and 89 MoE layers, 1 MTP layer, 96 heads of 128 and 8 KV heads on
    hidden 5120, 160 experts of 1536 with 8 routed and 1 shared): the transformer counts 352.8B
    without its MTP module (0.6% under 355B) and 32.1B activated without the input and output
    embeddings. OLMoE-1B-7B (Muennighoff et al. 2024, arXiv 2409.02060: 6.9B total, 1.3B active per
    token, 64 experts of which 8 active in every layer). OLMo 2 13B reads as Llama's shapes with its
    norms named."""
    glm = from_hf_config(_config("glm-4.7"), name="glm")
    model = catalog.model_spec_from_dict(glm.fields)
    assert (model.head_dim, model.num_kv_heads, model.first_dense_layers, model.num_moe_layers, model.mtp_num_layers) == (128, 8, 3, 89, 1)
    assert (model.num_experts, model.experts_per_token, model.num_shared_experts, model.router.value) == (160, 8, 1, "sigmoid_topk")
    assert total_parameter_count(model) / 1e9 == pytest.approx(355, rel=0.01)
    head = model.vocab_size * model.hidden_size  # the untied output projection, as large as the input table
    assert (active_parameter_count(model) - embedding_parameter_count(model) - head) / 1e9 == pytest.approx(32, rel=0.01)
    assert set(glm.not_modelled) == {"the attention projections' biases", "the per-head Q and K norms"}
    olmoe = catalog.model_spec_from_dict(from_hf_config(_config("olmoe-1b-7b"), name="olmoe").fields)
    assert (olmoe.num_experts, olmoe.experts_per_token, olmoe.num_moe_layers) == (64, 8, 16)
    assert total_parameter_count(olmoe) / 1e9 == pytest.approx(6.9, rel=0.01)
    assert active_parameter_count(olmoe) / 1e9 == pytest.approx(1.3, rel=0.03)
    olmo2 = from_hf_config(_config("olmo2-13b"), name="olmo2")
    assert {k: olmo2.fields[k] for k in ("num_layers", "hidden_size", "num_attention_heads", "num_kv_heads", "ffn_hidden_size", "vocab_size")} == {
        "num_layers": 40, "hidden_size": 5120, "num_attention_heads": 40, "num_kv_heads": 40, "ffn_hidden_size": 13824, "vocab_size": 100352,
    }
    assert olmo2.not_modelled == ("the Q and K norms and the norms after each sublayer",)


def test_phi4_and_starcoder2_read_as_llama_shaped_decoders():
    """Phi-4 (microsoft/phi-4, model_type phi3: 40 layers, 40 heads and 10 KV heads on hidden 5120,
    no window) counts 14.66B parameters, what its checkpoint holds: six bf16 shards of 4.93, 4.95,
    4.90, 4.77, 4.77 and 4.99 GB (the Hub's file listing), 29.31 GB at 2 bytes a parameter.
    StarCoder2-3B (bigcode/starcoder2-3b): an ungated GELU MLP, 2 KV heads, its 4096-token window in
    every layer, embeddings tied by default (its config states no tie_word_embeddings, and
    Starcoder2Config leaves PretrainedConfig's True), its biases named."""
    phi = catalog.model_spec_from_dict(from_hf_config(_config("phi-4"), name="phi-4").fields)
    assert (phi.num_kv_heads, phi.sliding_window, phi.tied_embeddings) == (10, 0, False)
    shards_gb = (4.93, 4.95, 4.90, 4.77, 4.77, 4.99)
    assert total_parameter_count(phi) == pytest.approx(sum(shards_gb) * 1e9 / 2, rel=0.002)
    star = from_hf_config(_config("starcoder2-3b"), name="sc2")
    model = catalog.model_spec_from_dict(star.fields)
    assert (model.mlp_activation.value, model.num_kv_heads, model.sliding_window, model.sliding_window_fraction) == ("gelu", 2, 4096, 1.0)
    assert model.tied_embeddings and star.not_modelled == ("the projections' biases",)
    with pytest.raises(SpecError) as caught:
        from_hf_config({**_config("starcoder2-3b"), "hidden_act": "relu"}, name="x")
    assert caught.value.field == "config.hidden_act"
