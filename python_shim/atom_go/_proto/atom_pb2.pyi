from google.protobuf.internal import containers as _containers
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class DescribeRequest(_message.Message):
    __slots__ = ("wire_version",)
    WIRE_VERSION_FIELD_NUMBER: _ClassVar[int]
    wire_version: int
    def __init__(self, wire_version: _Optional[int] = ...) -> None: ...

class ModelInfo(_message.Message):
    __slots__ = ("wire_version", "protocol_version", "engine_version", "loaded", "model_path", "architecture", "dtype", "device", "vocab_size", "max_model_len", "block_size", "num_kv_blocks", "num_layers", "num_heads", "num_kv_heads", "head_dim", "hidden_size", "capture_sizes", "has_tokenizer", "eos_token_ids", "max_num_seqs", "max_num_batched_tokens", "kv_block_bytes", "host_mode", "running_requests", "tensor_parallel_size")
    WIRE_VERSION_FIELD_NUMBER: _ClassVar[int]
    PROTOCOL_VERSION_FIELD_NUMBER: _ClassVar[int]
    ENGINE_VERSION_FIELD_NUMBER: _ClassVar[int]
    LOADED_FIELD_NUMBER: _ClassVar[int]
    MODEL_PATH_FIELD_NUMBER: _ClassVar[int]
    ARCHITECTURE_FIELD_NUMBER: _ClassVar[int]
    DTYPE_FIELD_NUMBER: _ClassVar[int]
    DEVICE_FIELD_NUMBER: _ClassVar[int]
    VOCAB_SIZE_FIELD_NUMBER: _ClassVar[int]
    MAX_MODEL_LEN_FIELD_NUMBER: _ClassVar[int]
    BLOCK_SIZE_FIELD_NUMBER: _ClassVar[int]
    NUM_KV_BLOCKS_FIELD_NUMBER: _ClassVar[int]
    NUM_LAYERS_FIELD_NUMBER: _ClassVar[int]
    NUM_HEADS_FIELD_NUMBER: _ClassVar[int]
    NUM_KV_HEADS_FIELD_NUMBER: _ClassVar[int]
    HEAD_DIM_FIELD_NUMBER: _ClassVar[int]
    HIDDEN_SIZE_FIELD_NUMBER: _ClassVar[int]
    CAPTURE_SIZES_FIELD_NUMBER: _ClassVar[int]
    HAS_TOKENIZER_FIELD_NUMBER: _ClassVar[int]
    EOS_TOKEN_IDS_FIELD_NUMBER: _ClassVar[int]
    MAX_NUM_SEQS_FIELD_NUMBER: _ClassVar[int]
    MAX_NUM_BATCHED_TOKENS_FIELD_NUMBER: _ClassVar[int]
    KV_BLOCK_BYTES_FIELD_NUMBER: _ClassVar[int]
    HOST_MODE_FIELD_NUMBER: _ClassVar[int]
    RUNNING_REQUESTS_FIELD_NUMBER: _ClassVar[int]
    TENSOR_PARALLEL_SIZE_FIELD_NUMBER: _ClassVar[int]
    wire_version: int
    protocol_version: int
    engine_version: str
    loaded: bool
    model_path: str
    architecture: str
    dtype: str
    device: str
    vocab_size: int
    max_model_len: int
    block_size: int
    num_kv_blocks: int
    num_layers: int
    num_heads: int
    num_kv_heads: int
    head_dim: int
    hidden_size: int
    capture_sizes: _containers.RepeatedScalarFieldContainer[int]
    has_tokenizer: bool
    eos_token_ids: _containers.RepeatedScalarFieldContainer[int]
    max_num_seqs: int
    max_num_batched_tokens: int
    kv_block_bytes: int
    host_mode: bool
    running_requests: int
    tensor_parallel_size: int
    def __init__(self, wire_version: _Optional[int] = ..., protocol_version: _Optional[int] = ..., engine_version: _Optional[str] = ..., loaded: bool = ..., model_path: _Optional[str] = ..., architecture: _Optional[str] = ..., dtype: _Optional[str] = ..., device: _Optional[str] = ..., vocab_size: _Optional[int] = ..., max_model_len: _Optional[int] = ..., block_size: _Optional[int] = ..., num_kv_blocks: _Optional[int] = ..., num_layers: _Optional[int] = ..., num_heads: _Optional[int] = ..., num_kv_heads: _Optional[int] = ..., head_dim: _Optional[int] = ..., hidden_size: _Optional[int] = ..., capture_sizes: _Optional[_Iterable[int]] = ..., has_tokenizer: bool = ..., eos_token_ids: _Optional[_Iterable[int]] = ..., max_num_seqs: _Optional[int] = ..., max_num_batched_tokens: _Optional[int] = ..., kv_block_bytes: _Optional[int] = ..., host_mode: bool = ..., running_requests: _Optional[int] = ..., tensor_parallel_size: _Optional[int] = ...) -> None: ...

class LoadModelRequest(_message.Message):
    __slots__ = ("wire_version", "model_path", "device", "dtype", "kv_cache_memory_bytes", "num_kv_blocks", "block_size", "max_model_len", "max_num_seqs", "max_num_batched_tokens", "enable_prefix_caching", "tokenizer", "extra_args")
    WIRE_VERSION_FIELD_NUMBER: _ClassVar[int]
    MODEL_PATH_FIELD_NUMBER: _ClassVar[int]
    DEVICE_FIELD_NUMBER: _ClassVar[int]
    DTYPE_FIELD_NUMBER: _ClassVar[int]
    KV_CACHE_MEMORY_BYTES_FIELD_NUMBER: _ClassVar[int]
    NUM_KV_BLOCKS_FIELD_NUMBER: _ClassVar[int]
    BLOCK_SIZE_FIELD_NUMBER: _ClassVar[int]
    MAX_MODEL_LEN_FIELD_NUMBER: _ClassVar[int]
    MAX_NUM_SEQS_FIELD_NUMBER: _ClassVar[int]
    MAX_NUM_BATCHED_TOKENS_FIELD_NUMBER: _ClassVar[int]
    ENABLE_PREFIX_CACHING_FIELD_NUMBER: _ClassVar[int]
    TOKENIZER_FIELD_NUMBER: _ClassVar[int]
    EXTRA_ARGS_FIELD_NUMBER: _ClassVar[int]
    wire_version: int
    model_path: str
    device: str
    dtype: str
    kv_cache_memory_bytes: int
    num_kv_blocks: int
    block_size: int
    max_model_len: int
    max_num_seqs: int
    max_num_batched_tokens: int
    enable_prefix_caching: bool
    tokenizer: str
    extra_args: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, wire_version: _Optional[int] = ..., model_path: _Optional[str] = ..., device: _Optional[str] = ..., dtype: _Optional[str] = ..., kv_cache_memory_bytes: _Optional[int] = ..., num_kv_blocks: _Optional[int] = ..., block_size: _Optional[int] = ..., max_model_len: _Optional[int] = ..., max_num_seqs: _Optional[int] = ..., max_num_batched_tokens: _Optional[int] = ..., enable_prefix_caching: bool = ..., tokenizer: _Optional[str] = ..., extra_args: _Optional[_Iterable[str]] = ...) -> None: ...

class LoadProgress(_message.Message):
    __slots__ = ("stage", "fraction", "message", "done", "info")
    STAGE_FIELD_NUMBER: _ClassVar[int]
    FRACTION_FIELD_NUMBER: _ClassVar[int]
    MESSAGE_FIELD_NUMBER: _ClassVar[int]
    DONE_FIELD_NUMBER: _ClassVar[int]
    INFO_FIELD_NUMBER: _ClassVar[int]
    stage: str
    fraction: float
    message: str
    done: bool
    info: ModelInfo
    def __init__(self, stage: _Optional[str] = ..., fraction: _Optional[float] = ..., message: _Optional[str] = ..., done: bool = ..., info: _Optional[_Union[ModelInfo, _Mapping]] = ...) -> None: ...

class SamplingParams(_message.Message):
    __slots__ = ("n", "temperature", "top_p", "top_k", "min_p", "seed", "repetition_penalty", "presence_penalty", "frequency_penalty", "max_tokens", "min_tokens", "ignore_eos", "stop_token_ids", "stop", "logprobs", "skip_special_tokens")
    N_FIELD_NUMBER: _ClassVar[int]
    TEMPERATURE_FIELD_NUMBER: _ClassVar[int]
    TOP_P_FIELD_NUMBER: _ClassVar[int]
    TOP_K_FIELD_NUMBER: _ClassVar[int]
    MIN_P_FIELD_NUMBER: _ClassVar[int]
    SEED_FIELD_NUMBER: _ClassVar[int]
    REPETITION_PENALTY_FIELD_NUMBER: _ClassVar[int]
    PRESENCE_PENALTY_FIELD_NUMBER: _ClassVar[int]
    FREQUENCY_PENALTY_FIELD_NUMBER: _ClassVar[int]
    MAX_TOKENS_FIELD_NUMBER: _ClassVar[int]
    MIN_TOKENS_FIELD_NUMBER: _ClassVar[int]
    IGNORE_EOS_FIELD_NUMBER: _ClassVar[int]
    STOP_TOKEN_IDS_FIELD_NUMBER: _ClassVar[int]
    STOP_FIELD_NUMBER: _ClassVar[int]
    LOGPROBS_FIELD_NUMBER: _ClassVar[int]
    SKIP_SPECIAL_TOKENS_FIELD_NUMBER: _ClassVar[int]
    n: int
    temperature: float
    top_p: float
    top_k: int
    min_p: float
    seed: int
    repetition_penalty: float
    presence_penalty: float
    frequency_penalty: float
    max_tokens: int
    min_tokens: int
    ignore_eos: bool
    stop_token_ids: _containers.RepeatedScalarFieldContainer[int]
    stop: _containers.RepeatedScalarFieldContainer[str]
    logprobs: int
    skip_special_tokens: bool
    def __init__(self, n: _Optional[int] = ..., temperature: _Optional[float] = ..., top_p: _Optional[float] = ..., top_k: _Optional[int] = ..., min_p: _Optional[float] = ..., seed: _Optional[int] = ..., repetition_penalty: _Optional[float] = ..., presence_penalty: _Optional[float] = ..., frequency_penalty: _Optional[float] = ..., max_tokens: _Optional[int] = ..., min_tokens: _Optional[int] = ..., ignore_eos: bool = ..., stop_token_ids: _Optional[_Iterable[int]] = ..., stop: _Optional[_Iterable[str]] = ..., logprobs: _Optional[int] = ..., skip_special_tokens: bool = ...) -> None: ...

class GenerateRequest(_message.Message):
    __slots__ = ("request_id", "prompt_token_ids", "prompt", "params", "output_offset")
    REQUEST_ID_FIELD_NUMBER: _ClassVar[int]
    PROMPT_TOKEN_IDS_FIELD_NUMBER: _ClassVar[int]
    PROMPT_FIELD_NUMBER: _ClassVar[int]
    PARAMS_FIELD_NUMBER: _ClassVar[int]
    OUTPUT_OFFSET_FIELD_NUMBER: _ClassVar[int]
    request_id: str
    prompt_token_ids: _containers.RepeatedScalarFieldContainer[int]
    prompt: str
    params: SamplingParams
    output_offset: int
    def __init__(self, request_id: _Optional[str] = ..., prompt_token_ids: _Optional[_Iterable[int]] = ..., prompt: _Optional[str] = ..., params: _Optional[_Union[SamplingParams, _Mapping]] = ..., output_offset: _Optional[int] = ...) -> None: ...

class TokenLogprob(_message.Message):
    __slots__ = ("token", "logprob", "top_ids", "top_logprobs")
    TOKEN_FIELD_NUMBER: _ClassVar[int]
    LOGPROB_FIELD_NUMBER: _ClassVar[int]
    TOP_IDS_FIELD_NUMBER: _ClassVar[int]
    TOP_LOGPROBS_FIELD_NUMBER: _ClassVar[int]
    token: int
    logprob: float
    top_ids: _containers.RepeatedScalarFieldContainer[int]
    top_logprobs: _containers.RepeatedScalarFieldContainer[float]
    def __init__(self, token: _Optional[int] = ..., logprob: _Optional[float] = ..., top_ids: _Optional[_Iterable[int]] = ..., top_logprobs: _Optional[_Iterable[float]] = ...) -> None: ...

class Output(_message.Message):
    __slots__ = ("index", "token_ids", "text", "logprobs", "finished", "finish_reason", "stop_string", "stop_token", "num_prompt_tokens", "num_cached_tokens")
    INDEX_FIELD_NUMBER: _ClassVar[int]
    TOKEN_IDS_FIELD_NUMBER: _ClassVar[int]
    TEXT_FIELD_NUMBER: _ClassVar[int]
    LOGPROBS_FIELD_NUMBER: _ClassVar[int]
    FINISHED_FIELD_NUMBER: _ClassVar[int]
    FINISH_REASON_FIELD_NUMBER: _ClassVar[int]
    STOP_STRING_FIELD_NUMBER: _ClassVar[int]
    STOP_TOKEN_FIELD_NUMBER: _ClassVar[int]
    NUM_PROMPT_TOKENS_FIELD_NUMBER: _ClassVar[int]
    NUM_CACHED_TOKENS_FIELD_NUMBER: _ClassVar[int]
    index: int
    token_ids: _containers.RepeatedScalarFieldContainer[int]
    text: str
    logprobs: _containers.RepeatedCompositeFieldContainer[TokenLogprob]
    finished: bool
    finish_reason: str
    stop_string: str
    stop_token: int
    num_prompt_tokens: int
    num_cached_tokens: int
    def __init__(self, index: _Optional[int] = ..., token_ids: _Optional[_Iterable[int]] = ..., text: _Optional[str] = ..., logprobs: _Optional[_Iterable[_Union[TokenLogprob, _Mapping]]] = ..., finished: bool = ..., finish_reason: _Optional[str] = ..., stop_string: _Optional[str] = ..., stop_token: _Optional[int] = ..., num_prompt_tokens: _Optional[int] = ..., num_cached_tokens: _Optional[int] = ...) -> None: ...

class GenerateResponse(_message.Message):
    __slots__ = ("request_id", "outputs", "prompt_token_ids")
    REQUEST_ID_FIELD_NUMBER: _ClassVar[int]
    OUTPUTS_FIELD_NUMBER: _ClassVar[int]
    PROMPT_TOKEN_IDS_FIELD_NUMBER: _ClassVar[int]
    request_id: str
    outputs: _containers.RepeatedCompositeFieldContainer[Output]
    prompt_token_ids: _containers.RepeatedScalarFieldContainer[int]
    def __init__(self, request_id: _Optional[str] = ..., outputs: _Optional[_Iterable[_Union[Output, _Mapping]]] = ..., prompt_token_ids: _Optional[_Iterable[int]] = ...) -> None: ...

class AbortRequest(_message.Message):
    __slots__ = ("request_id",)
    REQUEST_ID_FIELD_NUMBER: _ClassVar[int]
    request_id: str
    def __init__(self, request_id: _Optional[str] = ...) -> None: ...

class AbortResponse(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class InitKVCacheRequest(_message.Message):
    __slots__ = ("num_blocks", "block_size")
    NUM_BLOCKS_FIELD_NUMBER: _ClassVar[int]
    BLOCK_SIZE_FIELD_NUMBER: _ClassVar[int]
    num_blocks: int
    block_size: int
    def __init__(self, num_blocks: _Optional[int] = ..., block_size: _Optional[int] = ...) -> None: ...

class InitKVCacheResponse(_message.Message):
    __slots__ = ("info",)
    INFO_FIELD_NUMBER: _ClassVar[int]
    info: ModelInfo
    def __init__(self, info: _Optional[_Union[ModelInfo, _Mapping]] = ...) -> None: ...

class ExecuteModelRequest(_message.Message):
    __slots__ = ("payload",)
    PAYLOAD_FIELD_NUMBER: _ClassVar[int]
    payload: bytes
    def __init__(self, payload: _Optional[bytes] = ...) -> None: ...

class ExecuteModelResponse(_message.Message):
    __slots__ = ("result",)
    RESULT_FIELD_NUMBER: _ClassVar[int]
    result: bytes
    def __init__(self, result: _Optional[bytes] = ...) -> None: ...

class StatsRequest(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class EngineStats(_message.Message):
    __slots__ = ("stale", "running", "waiting", "num_preemptions", "kv_blocks_used", "kv_blocks_total", "kv_cache_usage", "prefix_cache_queries", "prefix_cache_hits", "num_requests", "prompt_tokens", "generated_tokens", "steps", "tokens_per_second", "last_step_nanos", "spec_num_drafts", "spec_num_draft_tokens", "spec_num_accepted_tokens")
    STALE_FIELD_NUMBER: _ClassVar[int]
    RUNNING_FIELD_NUMBER: _ClassVar[int]
    WAITING_FIELD_NUMBER: _ClassVar[int]
    NUM_PREEMPTIONS_FIELD_NUMBER: _ClassVar[int]
    KV_BLOCKS_USED_FIELD_NUMBER: _ClassVar[int]
    KV_BLOCKS_TOTAL_FIELD_NUMBER: _ClassVar[int]
    KV_CACHE_USAGE_FIELD_NUMBER: _ClassVar[int]
    PREFIX_CACHE_QUERIES_FIELD_NUMBER: _ClassVar[int]
    PREFIX_CACHE_HITS_FIELD_NUMBER: _ClassVar[int]
    NUM_REQUESTS_FIELD_NUMBER: _ClassVar[int]
    PROMPT_TOKENS_FIELD_NUMBER: _ClassVar[int]
    GENERATED_TOKENS_FIELD_NUMBER: _ClassVar[int]
    STEPS_FIELD_NUMBER: _ClassVar[int]
    TOKENS_PER_SECOND_FIELD_NUMBER: _ClassVar[int]
    LAST_STEP_NANOS_FIELD_NUMBER: _ClassVar[int]
    SPEC_NUM_DRAFTS_FIELD_NUMBER: _ClassVar[int]
    SPEC_NUM_DRAFT_TOKENS_FIELD_NUMBER: _ClassVar[int]
    SPEC_NUM_ACCEPTED_TOKENS_FIELD_NUMBER: _ClassVar[int]
    stale: bool
    running: int
    waiting: int
    num_preemptions: int
    kv_blocks_used: int
    kv_blocks_total: int
    kv_cache_usage: float
    prefix_cache_queries: int
    prefix_cache_hits: int
    num_requests: int
    prompt_tokens: int
    generated_tokens: int
    steps: int
    tokens_per_second: float
    last_step_nanos: int
    spec_num_drafts: int
    spec_num_draft_tokens: int
    spec_num_accepted_tokens: int
    def __init__(self, stale: bool = ..., running: _Optional[int] = ..., waiting: _Optional[int] = ..., num_preemptions: _Optional[int] = ..., kv_blocks_used: _Optional[int] = ..., kv_blocks_total: _Optional[int] = ..., kv_cache_usage: _Optional[float] = ..., prefix_cache_queries: _Optional[int] = ..., prefix_cache_hits: _Optional[int] = ..., num_requests: _Optional[int] = ..., prompt_tokens: _Optional[int] = ..., generated_tokens: _Optional[int] = ..., steps: _Optional[int] = ..., tokens_per_second: _Optional[float] = ..., last_step_nanos: _Optional[int] = ..., spec_num_drafts: _Optional[int] = ..., spec_num_draft_tokens: _Optional[int] = ..., spec_num_accepted_tokens: _Optional[int] = ...) -> None: ...
