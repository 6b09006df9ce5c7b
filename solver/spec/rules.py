"""Every rule a configuration or a search can break, by name, and the violation type that
carries one.

A rule's name travels as data (``Violation.rule``, ``SpecError.rule``), never parsed back out of
message text. The text form ``"[rule] what broke it"`` is what the API prints; ``Violation`` is
that string with its rule attached, so it serialises as the text and still answers ``.rule``.
"""

from __future__ import annotations

from enum import Enum


class Rule(str, Enum):
    # Structure (``solver.spec.legality.check_structure``): the configuration has no meaning.
    GPU_COUNT = "gpu_count"
    TP_DIVIDES_NUM_ATTENTION_HEADS = "tp_divides_num_attention_heads"
    TP_DIVIDES_NUM_KV_HEADS = "tp_divides_num_kv_heads"
    TP_DIVIDES_FFN_HIDDEN_SIZE = "tp_divides_ffn_hidden_size"
    PRECISION = "precision"
    BATCH_DIVISIBLE = "batch_divisible"
    PP_AT_MOST_LAYERS = "pp_at_most_layers"
    INTERLEAVE_NEEDS_PP = "interleave_needs_pp"
    INTERLEAVE_LAYERS_DIVISIBLE = "interleave_layers_divisible"
    INTERLEAVE_MICRO_BATCHES = "interleave_micro_batches"
    PARTITION_COVERS_LAYERS = "partition_covers_layers"
    RECOMPUTE_WITHIN_STAGE = "recompute_within_stage"
    CP_DIVIDES_SEQUENCE = "cp_divides_sequence"
    CP_NEEDS_FUSED_ATTENTION = "cp_needs_fused_attention"
    TP_DIVIDES_MOE_FFN_HIDDEN_SIZE = "tp_divides_moe_ffn_hidden_size"
    EP_NEEDS_EXPERTS = "ep_needs_experts"
    EP_DIVIDES_EXPERTS = "ep_divides_experts"
    EP_DIVIDES_DATA_PARALLEL = "ep_divides_data_parallel"
    ETP_NEEDS_EXPERTS = "etp_needs_experts"
    ETP_DIVIDES_MOE_FFN_HIDDEN_SIZE = "etp_divides_moe_ffn_hidden_size"
    EXPERT_GROUP_DIVIDES_RANKS = "expert_group_divides_ranks"
    OFFLOAD_NEEDS_HOST = "offload_needs_host"
    OFFLOAD_WITH_PP = "offload_with_pp"
    OFFLOAD_NEEDS_ZERO = "offload_needs_zero"
    OFFLOAD_NEEDS_NVME = "offload_needs_nvme"
    OFFLOAD_OPTIMIZER_KIND = "offload_optimizer_kind"
    NVME_OFFLOAD_MODE = "nvme_offload_mode"
    ACTIVATION_OFFLOAD_LAYERS = "activation_offload_layers"
    # Policy: costed, but a framework cannot run it or the request forbids it.
    TP_WITHIN_NODE = "tp_within_node"
    ZERO_WITH_PP = "zero_with_pp"
    FRAMEWORK_ZERO = "framework_zero"
    FRAMEWORK_PP = "framework_pp"
    FRAMEWORK_CP = "framework_cp"
    FRAMEWORK_EP = "framework_ep"
    FRAMEWORK_EXPERT_TP = "framework_expert_tp"
    FRAMEWORK_ACTIVATION_OFFLOAD = "framework_activation_offload"
    FRAMEWORK_NVME = "framework_nvme"
    FRAMEWORK_EXACT = "framework_exact"  # the request's framework runs it exactly only with other training settings or values
    # Fit and objective.
    MEMORY = "memory"
    HOST_MEMORY = "host_memory"
    NVME_CAPACITY = "nvme_capacity"
    DEADLINE = "deadline"
    # Search bookkeeping: nothing left after the request's own constraints; the validator
    # disagreeing with the search (never expected).
    CONSTRAINTS = "constraints"
    VALIDATOR = "validator"

    @property
    def tag(self) -> str:
        """The bracketed form used in messages and in a search's rejection counts."""
        return f"[{self.value}]"

    @property
    def summary(self) -> str:
        """One line a person can read, for an explanation; the tag where none is written."""
        return _SUMMARIES.get(self, self.tag)


_SUMMARIES = {
    Rule.MEMORY: "no configuration fits in GPU memory",
    Rule.DEADLINE: "no plan meets the deadline",
    Rule.HOST_MEMORY: "what is offloaded does not fit in the nodes' host memory",
    Rule.OFFLOAD_NEEDS_HOST: "offload needs the cluster's host memory, PCIe and host memory bandwidth",
    Rule.OFFLOAD_WITH_PP: "offload is planned without pipeline parallelism (pp_size 1)",
    Rule.OFFLOAD_OPTIMIZER_KIND: "offload is costed for Adam and SGD, whose step the host runs; Muon's runs on the GPU",
    Rule.OFFLOAD_NEEDS_ZERO: (
        "offload steps each rank's ZeRO shard: stage 1 or more for the optimizer over several ranks, 3 for parameters"
        " and for anything on NVMe"
    ),
    Rule.OFFLOAD_NEEDS_NVME: "offload to NVMe needs the cluster's NVMe capacity and read and write bandwidth (and its host facts)",
    Rule.NVME_OFFLOAD_MODE: "NVMe holds only what is offloaded: the optimizer needs offload, the parameters parameter offload",
    Rule.NVME_CAPACITY: "what is offloaded to NVMe does not fit on the nodes' NVMe drives",
    Rule.ACTIVATION_OFFLOAD_LAYERS: (
        "activation offload (Megatron-core cpu_offloading) runs on one pipeline stage, without recomputation,"
        " for fewer layers than the model has, and beside model-state offload only as the optimizer's at ZeRO-0/1"
    ),
    Rule.TP_WITHIN_NODE: "tensor parallelism must stay inside a node (its NVLink domain, where that is larger or smaller)",
    Rule.ZERO_WITH_PP: "ZeRO-2/3 cannot be combined with pipeline parallelism",
    Rule.FRAMEWORK_ZERO: "the framework does not offer that ZeRO stage",
    Rule.FRAMEWORK_PP: "the framework has no pipeline parallelism",
    Rule.FRAMEWORK_ACTIVATION_OFFLOAD: "the framework has no partial activation offload (Megatron-core's cpu_offloading_num_layers)",
    Rule.FRAMEWORK_CP: "the framework has no context parallelism",
    Rule.FRAMEWORK_NVME: "the framework has no offload to NVMe (DeepSpeed's ZeRO-3 alone has it)",
    Rule.FRAMEWORK_EP: "the framework has no expert parallelism",
    Rule.FRAMEWORK_EXPERT_TP: "the framework cannot split the experts over that expert_tp_size",
    Rule.FRAMEWORK_EXACT: "the framework cannot run the plan exactly as planned (its launch config would differ)",
    Rule.EP_NEEDS_EXPERTS: "expert parallelism needs a mixture-of-experts model",
    Rule.EP_DIVIDES_EXPERTS: "ep_size does not divide the number of experts",
    Rule.EP_DIVIDES_DATA_PARALLEL: "ep_size does not divide dp_size x cp_size, the ranks it is carved from",
    Rule.ETP_NEEDS_EXPERTS: "an expert_tp_size other than tp_size needs a mixture-of-experts model",
    Rule.ETP_DIVIDES_MOE_FFN_HIDDEN_SIZE: "expert_tp_size does not divide the experts' hidden size (moe_ffn_hidden_size)",
    Rule.EXPERT_GROUP_DIVIDES_RANKS: "ep_size x expert_tp_size does not divide tp_size x dp_size x cp_size, the ranks an expert group is carved from",
    Rule.CP_DIVIDES_SEQUENCE: "the sequence length does not split into 2 x cp_size equal chunks",
    Rule.CP_NEEDS_FUSED_ATTENTION: "context parallelism needs fused (flash) attention",
    Rule.BATCH_DIVISIBLE: "the global batch does not divide over dp_size x micro_batch_size",
    Rule.PP_AT_MOST_LAYERS: "more pipeline stages than layers",
    Rule.INTERLEAVE_MICRO_BATCHES: "interleaving needs micro-batches in multiples of pp_size",
    Rule.INTERLEAVE_NEEDS_PP: "interleaving needs pipeline parallelism (pp_size > 1)",
    Rule.INTERLEAVE_LAYERS_DIVISIBLE: "interleaving needs num_layers divisible by pp_size x virtual_stages",
}


class Violation(str):
    """A broken rule: its ``rule`` and ``text``; as a string, ``"[rule] text"``."""

    rule: Rule
    text: str

    def __new__(cls, rule: Rule, text: str) -> "Violation":
        self = super().__new__(cls, f"{rule.tag} {text}")
        self.rule = rule
        self.text = text
        return self

    def __reduce__(self) -> tuple[type, tuple[Rule, str]]:
        return (type(self), (self.rule, self.text))
