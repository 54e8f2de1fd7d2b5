"""Read the training config files a user already has and tell which framework wrote them.

Each reader returns a :class:`ConfigFile`: the raw key/value mapping, the framework, and (for YAML) the line of every
top-level key so that an error can name it. Nothing here interprets values; :mod:`gradian.run.setup` does that.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from gradian.errors import GradianError
from gradian.run.textfiles import load_json_file, read_text

# --- key tables --------------------------------------------------------------------------------------------------

# transformers.TrainingArguments fields over 4.4x - 5.x (a union, so a dump from any of them is recognised).
HF_TRAINING_ARGS_KEYS = frozenset(
    """
    output_dir overwrite_output_dir do_train do_eval do_predict eval_strategy evaluation_strategy prediction_loss_only
    per_device_train_batch_size per_device_eval_batch_size per_gpu_train_batch_size per_gpu_eval_batch_size
    gradient_accumulation_steps eval_accumulation_steps eval_delay torch_empty_cache_steps learning_rate weight_decay
    adam_beta1 adam_beta2 adam_epsilon max_grad_norm num_train_epochs max_steps lr_scheduler_type lr_scheduler_kwargs
    warmup_ratio warmup_steps log_level log_level_replica log_on_each_node logging_dir logging_strategy
    logging_first_step logging_steps logging_nan_inf_filter save_strategy save_steps save_total_limit save_safetensors
    save_on_each_node save_only_model restore_callback_states_from_checkpoint no_cuda use_cpu use_mps_device seed
    data_seed jit_mode_eval use_ipex bf16 fp16 fp16_opt_level half_precision_backend bf16_full_eval fp16_full_eval tf32
    local_rank ddp_backend tpu_num_cores tpu_metrics_debug debug dataloader_drop_last eval_steps dataloader_num_workers
    dataloader_prefetch_factor past_index run_name disable_tqdm remove_unused_columns label_names
    load_best_model_at_end metric_for_best_model greater_is_better ignore_data_skip fsdp fsdp_min_num_params
    fsdp_config fsdp_transformer_layer_cls_to_wrap accelerator_config parallelism_config deepspeed
    label_smoothing_factor optim optim_args adafactor group_by_length length_column_name report_to
    ddp_find_unused_parameters ddp_bucket_cap_mb ddp_broadcast_buffers ddp_static_graph ddp_timeout
    dataloader_pin_memory dataloader_persistent_workers dataloader_in_order dataloader_multiprocessing_context
    skip_memory_metrics use_legacy_prediction_loop push_to_hub resume_from_checkpoint hub_model_id hub_strategy
    hub_token hub_private_repo hub_always_push hub_revision gradient_checkpointing gradient_checkpointing_kwargs
    activation_checkpointing activation_checkpointing_kwargs include_inputs_for_metrics include_for_metrics
    eval_do_concat_batches fp16_backend push_to_hub_model_id push_to_hub_organization push_to_hub_token mp_parameters
    auto_find_batch_size full_determinism torchdynamo ray_scope torch_compile torch_compile_backend
    torch_compile_mode include_tokens_per_second include_num_input_tokens_seen neftune_noise_alpha
    optim_target_modules batch_eval_metrics eval_on_start use_liger_kernel liger_kernel_config eval_use_gather_object
    average_tokens_across_devices use_cache enable_jit_checkpoint train_sampling_strategy project trackio_space_id
    trackio_bucket_id trackio_static_space_id split_batches dispatch_batches include_inputs_for_metrics
    sortish_sampler predict_with_generate generation_max_length generation_num_beams generation_config
    """.split()
)

# keys only trl.SFTConfig has (on top of TrainingArguments), 0.12 - 0.2x.
TRL_SFT_KEYS = frozenset(
    """
    dataset_text_field packing packing_strategy padding_free max_length max_seq_length completion_only_loss
    assistant_only_loss dataset_kwargs dataset_num_proc dataset_batch_size eos_token pad_token chat_template_path
    model_init_kwargs num_of_sequences chars_per_token eval_packing pad_to_multiple_of use_liger loss_type
    activation_offloading shuffle_dataset padding_side dataset_train_split dataset_test_split skip_prepare_dataset
    truncation_mode
    """.split()
)

# the SFT keys that mark a JSON dump as TRL (not all of TRL_SFT_KEYS: some are generic words)
_TRL_MARKERS = frozenset(
    {"dataset_text_field", "packing", "max_seq_length", "completion_only_loss", "assistant_only_loss",
     "dataset_kwargs", "packing_strategy", "padding_free", "model_init_kwargs", "chat_template_path"}
)  # fmt: skip

# Axolotl's top-level keys and its bundled plugins' keys, over releases (the keys of 0.19.0's own schema:
# tests/fixtures/golden/axolotl_0.19.0_config_keys.json, recorded by bench/frameworks/record_config_keys.py).
AXOLOTL_KEYS = frozenset(
    """
    base_model base_model_config cls_model_config base_model_ignore_patterns model_type model_config model_kwargs
    model_revision revision_of_model tokenizer_config tokenizer_use_fast tokenizer_legacy tokenizer_type
    tokenizer_use_mistral_common tokenizer_save_jinja_files processor_type trust_remote_code is_llama_derived_model
    is_mistral_derived_model is_qwen_derived_model is_falcon_derived_model model_config_type
    overrides_of_model_config overrides_of_model_kwargs type_of_model experimental_skip_move_to_device use_kernels
    model_quantization_config model_quantization_config_kwargs
    output_dir hub_model_id hub_strategy hub_revision save_safetensors
    load_in_8bit load_in_4bit adapter lora_model_dir lora_r lora_alpha lora_fan_in_fan_out lora_target_modules
    lora_target_parameters lora_target_linear lora_modules_to_save lora_dropout peft_layers_to_transform
    peft_layers_pattern peft peft_use_dora peft_use_rslora peft_layer_replication peft_init_lora_weights
    peft_trainable_token_indices peft_ensure_weight_tying peft_autocast_adapter_dtype qlora_sharded_model_loading
    lora_on_cpu gptq bnb_config_kwargs loraplus_lr_ratio loraplus_lr_embedding merge_lora merge_method
    relora relora_steps relora_warmup_steps relora_anneal_steps relora_prune_ratio relora_prune_method
    relora_cpu_offload jagged_restart_steps jagged_restart_warmup_steps jagged_restart_anneal_steps
    gradient_accumulation_steps micro_batch_size batch_size eval_batch_size auto_find_batch_size train_on_inputs
    group_by_length learning_rate embedding_lr embedding_lr_scale weight_decay optimizer optim_args
    optim_target_modules torchdistx_path lr_scheduler lr_scheduler_kwargs lr_quadratic_warmup cosine_min_lr_ratio
    cosine_constant_lr_ratio lr_div_factor lr_groups adam_epsilon adam_epsilon2 adam_beta1 adam_beta2 adam_beta3
    max_grad_norm num_epochs
    wandb_project wandb_entity wandb_watch wandb_name wandb_run_id wandb_log_model wandb_mode mlflow_tracking_uri
    mlflow_experiment_name mlflow_run_name hf_mlflow_log_artifacts use_mlflow comet_api_key comet_workspace
    comet_project_name comet_experiment_key comet_mode comet_online comet_experiment_config use_comet
    lisa_n_layers lisa_step_interval lisa_layers_attribute gradio_title gradio_share gradio_server_name
    gradio_server_port gradio_max_new_tokens gradio_temperature use_ray ray_run_name ray_num_workers
    resources_per_worker
    strict resume_from_checkpoint auto_resume_from_checkpoints resize_token_embeddings_to_32x mean_resizing_embeddings
    shrink_embeddings embeddings_skip_upcast rl trl vllm qat quantization reward_model process_reward_model num_labels
    dpo_use_weighting dpo_use_logits_to_keep dpo_beta dpo_label_smoothing dpo_generate_during_eval dpo_norm_loss
    datasets test_datasets shuffle_merged_datasets shuffle_before_merging_datasets dataset_prepared_path
    dataset_shard_num dataset_shard_idx skip_prepare_dataset pretraining_dataset dataset_processes
    dataset_num_proc dataset_exact_deduplication dataset_keep_in_memory dataloader_pin_memory dataloader_num_workers
    dataloader_prefetch_factor dataloader_drop_last accelerator_config remove_unused_columns push_dataset_to_hub
    hf_use_auth_token device device_map world_size local_rank ddp seed ddp_timeout ddp_bucket_cap_mb
    ddp_broadcast_buffers ddp_find_unused_parameters eval_table_size eval_max_new_tokens do_causal_lm_eval
    eval_causal_lm_metrics do_bench_eval bench_dataset bench_split metric_for_best_model greater_is_better
    loss_watchdog_threshold loss_watchdog_patience gc_steps bf16 fp16 fp8 bfloat16 float16 tf32 float32
    gradient_checkpointing gradient_checkpointing_kwargs activation_offloading unfrozen_parameters sequence_len
    min_sample_len max_prompt_len sample_packing sample_packing_group_size sample_packing_bin_size
    sample_packing_sequentially sample_packing_eff_est eval_sample_packing pad_to_sequence_len curriculum_sampling
    multipack_real_batches pretraining_sample_concatenation batch_flattening use_pose pose_split_on_token_ids
    pose_max_context_len pose_num_chunks pretrain_multipack_buffer_size pretrain_multipack_attn xformers_attention
    sdp_attention s2_attention flex_attention flex_attn_compile_kwargs flash_attention flash_attn_cross_entropy
    flash_attn_rms_norm flash_attn_fuse_qkv flash_attn_fuse_mlp flash_optimum eager_attention attn_implementation
    unsloth_cross_entropy_loss unsloth_lora_mlp unsloth_lora_qkv unsloth_lora_o unsloth_rms_norm unsloth_rope
    lora_mlp_kernel lora_qkv_kernel lora_o_kernel llama4_linearized_experts deepspeed fsdp fsdp_config
    fsdp_version fsdp_final_state_dict_type val_set_size sequence_parallel_degree context_parallel_size
    tensor_parallel_size heads_k_stride ring_attn_func special_tokens tokens added_tokens_overrides torch_compile
    torch_compile_backend torch_compile_mode max_steps warmup_steps warmup_ratio eval_steps evals_per_epoch
    eval_strategy evaluation_strategy save_steps saves_per_epoch save_strategy save_total_limit save_first_step
    logging_steps early_stopping_patience load_best_model_at_end save_only_model use_tensorboard profiler_steps
    include_tokens_per_second neftune_noise_alpha noisy_embedding_alpha orpo_alpha rpo_alpha simpo_gamma cpo_alpha
    kto_desirable_weight kto_undesirable_weight rl_beta max_memory gpu_memory_limit low_cpu_mem_usage chat_template
    chat_template_jinja eot_tokens default_system_message fix_untrained_tokens is_preprocess preprocess_iterable
    total_num_tokens total_supervised_tokens axolotl_config_path plugins max_packed_sequence_len rope_scaling
    excess_length_strategy drop_long_seq sequence_len_overflow_handling use_wandb use_liger_kernel
    liger_rope liger_rms_norm liger_glu_activation liger_layer_norm liger_fused_linear_cross_entropy
    cut_cross_entropy save_steps_strategy include_tokenizer_for_eval generate_samples num_generation_samples
    generation_max_new_tokens debug_num_examples dataset_exact_deduplication train_on_eos roles_to_train
    center_rewards_coefficient chat_template_kwargs chunked_cross_entropy chunked_cross_entropy_num_chunks
    deepcompile dense_mixer diffusion dion_lr dion_momentum dion_rank_fraction dion_rank_multiple_of
    dp_replicate_size dp_shard_size dpo_loss_type dpo_loss_weights dpo_padding_free dpo_use_liger_kernel
    dsv4_bf16_all dsv4_fp4_grouped_mode dsv4_fp8_lora_kernel dsv4_fp8_nonexpert_mode dsv4_shared_mlp_lora_kernel
    dynamic_checkpoint eaft_alpha eaft_k ebft eval_sequence_len expert_backend expert_parallel_backend
    expert_parallel_fallback_on_unsupported expert_parallel_num_nvl_bytes expert_parallel_num_rdma_bytes
    expert_parallel_size expert_parallel_token_capacity experts_implementation flash_attn_d512 fp32_norm_classes
    fp32_norms fp8_config fp8_enable_fsdp_float8_all_gather freeze_mm_modules fused_attn_kernel gc_collect_steps
    gemma4_fp8_nonexpert gemma4_hybrid_attn_impl gemma4_nf4_nonexpert generation_do_sample generation_prompt_ratio
    generation_temperature generation_top_k generation_top_p grokfast_alpha grokfast_lamb hatchery
    image_resize_algorithm image_size include_tkps kd_alpha kd_beta kd_ce_alpha kd_normalize_topk kd_online_server
    kd_online_server_base_url kd_online_timeout kd_online_topk kd_temperature kd_temperature_min kd_trainer
    large_head_attention layer_offloading liger_cross_entropy liger_kernel_impl liger_rms_norm_gated liger_swiglu
    liger_use_token_scaling lm_eval_batch_size lm_eval_model lm_eval_post_train lm_eval_tasks lora_alpha_pattern
    lora_embedding_kernel lora_rank_pattern moe_bnb_fast moe_dequant_chunk_size moe_grouped_backend mora
    nemo_gym_auto_clone nemo_gym_auto_start nemo_gym_config_paths nemo_gym_datasets nemo_gym_dir nemo_gym_enabled
    nemo_gym_head_port nemo_gym_max_turns nemo_gym_model_name nemo_gym_multi_turn nemo_gym_run_timeout
    nemo_gym_server_timeout nemo_gym_verify_timeout nonexpert_quantization num_dataset_shards_to_save
    nvfp4_merge_aware nvfp4_merge_aware_start_step otel_metrics_host otel_metrics_port pad_to_multiple_of
    ple_cpu_offload precompute_ref_log_probs processor_kwargs profiler_steps_start qgalore_cos_threshold
    qgalore_gamma_proj qgalore_proj_bits qgalore_proj_group_size qgalore_proj_quant qgalore_proj_type
    qgalore_queue_size qgalore_rank qgalore_scale qgalore_update_proj_gap quantize_moe_experts reinit_weights
    role_boundaries sage_attention sample_packing_mp_start_method scaling_softmax scaling_softmax_bias
    scaling_softmax_factor sdpa_varlen selective_checkpointing spectrum_model_name spectrum_top_fraction streaming
    streaming_multipack_buffer_size swanlab_api_host swanlab_api_key swanlab_completion_log_interval
    swanlab_completion_max_buffer swanlab_description swanlab_experiment_name swanlab_lark_secret
    swanlab_lark_webhook_url swanlab_log_completions swanlab_log_model swanlab_mode swanlab_project swanlab_web_host
    swanlab_workspace tiled_mlp tiled_mlp_num_shards tiled_mlp_use_original_mlp torch_compile_options
    torch_empty_cache_steps trackio_project_name trackio_run_name trackio_space_id trainer_cls use_dsv4_kernels
    use_eaft use_glm_dsa_kernels use_onebitllms use_otel_metrics use_scattermoe use_sonicmoe use_swanlab use_trackio
    """.split()
)

AXOLOTL_DEPRECATED = {
    "evaluation_strategy": "eval_strategy",
    "max_packed_sequence_len": "sample_packing",
    "noisy_embedding_alpha": "neftune_noise_alpha",
    "dpo_beta": "rl_beta",
    "rope_scaling": "model_config: rope_scaling",
    "eval_table_size": "generate_samples",
    "eval_max_new_tokens": "generation_max_new_tokens",
    "s2_attention": "(removed)",
    "flash_attn_rms_norm": "(removed)",
}

# LLaMA-Factory's argument dataclasses over releases (0.9.5's own: tests/fixtures/golden/
# llamafactory_0.9.5_config_keys.json, recorded by bench/frameworks/record_config_keys.py).
LLAMAFACTORY_KEYS = HF_TRAINING_ARGS_KEYS | frozenset(
    """
    model_name_or_path adapter_name_or_path adapter_folder cache_dir use_fast_tokenizer resize_vocab
    split_special_tokens
    add_tokens add_special_tokens new_special_tokens model_revision low_cpu_mem_usage rope_scaling flash_attn
    shift_attn mixture_of_depths use_unsloth use_unsloth_gc enable_liger_kernel moe_aux_loss_coef
    disable_gradient_checkpointing use_reentrant_gc upcast_layernorm upcast_lmhead_output train_from_scratch
    infer_backend offload_folder use_cache infer_dtype hf_hub_token ms_hub_token om_hub_token print_param_status
    trust_remote_code quantization_method quantization_bit quantization_type double_quantization quantization_device_map
    image_max_pixels image_min_pixels image_do_pan_and_scan crop_to_patches video_max_pixels video_min_pixels video_fps
    video_maxlen use_audio_in_video audio_sampling_rate export_dir export_size export_device export_quantization_bit
    export_quantization_dataset export_quantization_nsamples export_quantization_maxlen export_legacy_format
    export_hub_model_id vllm_maxlen vllm_gpu_util vllm_enforce_eager vllm_max_lora_rank vllm_config sglang_maxlen
    sglang_mem_fraction sglang_tp_size sglang_config sglang_lora_backend compute_dtype device_map model_max_length
    block_diag_attn kt_optimize_rule cpu_infer chunk_size mode use_kt kt_maxlen kt_use_cuda_graph kt_mode
    kt_force_think template dataset eval_dataset dataset_dir media_dir cutoff_len train_on_prompt mask_history
    streaming buffer_size mix_strategy interleave_probs overwrite_cache preprocessing_batch_size
    preprocessing_num_workers max_samples eval_num_beams ignore_pad_token_for_loss val_size eval_on_each_dataset
    packing neat_packing tool_format default_system enable_thinking tokenized_path data_shared_file_system
    stage finetuning_type use_llama_pro use_adam_mini use_mca use_muon use_dft_loss use_asft_loss asft_alpha
    use_eaft_loss eaft_alpha freeze_vision_tower freeze_multi_modal_projector freeze_language_model compute_accuracy
    disable_shuffling early_stopping_steps plot_loss include_effective_tokens_per_second
    freeze_trainable_layers freeze_trainable_modules freeze_extra_modules additional_target lora_alpha lora_dropout
    lora_rank lora_target loraplus_lr_ratio loraplus_lr_embedding use_rslora use_dora pissa_init pissa_iter
    pissa_convert create_new_adapter pref_beta pref_ftx pref_bco_weight pref_loss dpo_label_smoothing kto_chosen_weight
    kto_rejected_weight simpo_gamma ppo_buffer_size ppo_epochs ppo_score_norm ppo_target ppo_whiten_rewards ref_model
    ref_model_adapters ref_model_quantization_bit reward_model reward_model_adapters reward_model_quantization_bit
    reward_model_type ld_alpha use_galore galore_target galore_rank galore_update_interval galore_scale
    galore_proj_type galore_layerwise use_apollo apollo_target apollo_rank apollo_update_interval apollo_scale
    apollo_proj apollo_proj_type apollo_scale_type apollo_layerwise apollo_scale_front use_badam badam_mode
    badam_start_block badam_switch_mode badam_switch_interval badam_update_ratio badam_mask_mode badam_verbose
    use_swanlab swanlab_project swanlab_workspace swanlab_run_name swanlab_mode swanlab_api_key swanlab_logdir
    swanlab_lark_webhook_url swanlab_lark_secret use_oft oft_rank oft_block_size oft_target module_dropout
    eval_with_generate do_sample temperature top_p top_k num_beams max_length max_new_tokens repetition_penalty
    length_penalty skip_special_tokens ray_run_name ray_storage_path ray_storage_filesystem ray_num_workers
    resources_per_worker placement_strategy ray_init_kwargs master_addr master_port fp8 fp8_backend
    fp8_enable_fsdp_float8_all_gather sequence_parallel_size sequence_parallel_mode overwrite_output_dir
    enable_torch_profiler hyper_parallel_args init_special_tokens kt_expert_checkpoint_path
    kt_lora_expert_intermediate_size kt_lora_expert_num kt_use_lora_experts kt_weight_path new_special_tokens_config
    preserve_thinking profile_modules profiler_active_steps profiler_output_dir profiler_profile_memory
    profiler_record_shapes profiler_repeat profiler_wait_steps profiler_warmup_steps profiler_with_stack pure_bf16
    use_hyper_parallel use_kv_cache use_v1_kernels
    """.split()
)

HF_DEPRECATED = {
    "evaluation_strategy": "eval_strategy",
    "max_seq_length": "max_length",
    "per_gpu_train_batch_size": "per_device_train_batch_size",
    "per_gpu_eval_batch_size": "per_device_eval_batch_size",
    "no_cuda": "use_cpu",
    "use_mps_device": "(removed)",
    "dataset_batch_size": "(removed)",
    "num_of_sequences": "(removed)",
    "chars_per_token": "(removed)",
    "fp16_backend": "half_precision_backend",
    "push_to_hub_model_id": "hub_model_id",
    "include_inputs_for_metrics": "include_for_metrics",
}

_NOT_CONFIG_JSON = {
    "adapter_config.json",
    "trainer_state.json",
    "tokenizer.json",
    "tokenizer_config.json",
    "special_tokens_map.json",
    "generation_config.json",
    "config.json",
    "vocab.json",
    "added_tokens.json",
    "preprocessor_config.json",
    "all_results.json",
    "train_results.json",
    "eval_results.json",
    "adapter_model.safetensors.index.json",
    "model.safetensors.index.json",
}


@dataclass
class ConfigFile:
    """One config file as read: its mapping, framework and kind."""

    path: Path
    kind: str  # "hf_json" | "axolotl_yaml" | "llamafactory_yaml" | "training_args_bin" | "tensorboard_args"
    framework: str | None  # "trl" | "transformers" | "axolotl" | "llamafactory"
    data: dict[str, Any] = field(default_factory=dict)
    key_lines: dict[str, int] = field(default_factory=dict)  # top-level YAML key -> 1-based line
    class_path: str | None = None  # training_args.bin: the pickled class

    @property
    def name(self) -> str:
        return self.path.name

    def where(self, key: str) -> str:
        line = self.key_lines.get(key)
        return f"{self.name} line {line}: {key}" if line else f"{self.name}: {key}"


# --- classification ----------------------------------------------------------------------------------------------


def looks_like_hf_args(data: dict[str, Any]) -> bool:
    """A JSON mapping with enough TrainingArguments keys to be a dumped TrainingArguments / SFTConfig."""
    core = {"learning_rate", "per_device_train_batch_size", "num_train_epochs", "gradient_accumulation_steps",
            "output_dir", "max_steps", "lr_scheduler_type"}  # fmt: skip
    return len(core & data.keys()) >= 2


def hf_framework(data: dict[str, Any], class_path: str | None = None) -> str:
    """ "trl" for an SFTConfig (by class or keys), "axolotl" for Axolotl's own arguments, else "transformers"."""
    if class_path:
        low = class_path.lower()
        if low.startswith("trl."):
            return "trl"
        if low.startswith("axolotl."):
            return "axolotl"
        if low.startswith("llamafactory."):
            return "llamafactory"
    if _TRL_MARKERS & data.keys():
        return "trl"
    return "transformers"


def yaml_framework(data: dict[str, Any]) -> str | None:
    """ "axolotl" or "llamafactory" from the keys of a YAML mapping, None when neither fits."""
    keys = data.keys()
    axo = len(keys & {"base_model", "sequence_len", "micro_batch_size", "num_epochs", "sample_packing",
                      "train_on_inputs", "lora_r", "lora_target_linear", "lora_target_modules", "val_set_size",
                      "adapter", "lr_scheduler", "special_tokens"})  # fmt: skip
    lf = len(keys & {"model_name_or_path", "finetuning_type", "stage", "cutoff_len", "template", "lora_rank",
                     "lora_target", "train_on_prompt", "val_size", "neat_packing", "dataset_dir"})  # fmt: skip
    if axo == 0 and lf == 0:
        if looks_like_hf_args(data):
            return "transformers"
        return None
    return "axolotl" if axo >= lf else "llamafactory"


# --- readers -----------------------------------------------------------------------------------------------------


def _mapping(data: Any, path: Path, what: str) -> dict[str, Any]:
    if not isinstance(data, dict):
        kind = "empty" if data is None else f"a {type(data).__name__}"
        raise GradianError(
            f"expected a mapping of keys to values at the top level, got {kind}",
            where=str(path),
            fix=f"pass the {what} (key: value pairs)",
        )
    return data


def read_json_config(path: Path) -> ConfigFile:
    data = _mapping(load_json_file(path), path, "training arguments")
    if isinstance(data.get("args"), dict) and looks_like_hf_args(data["args"]):
        data = data["args"]  # some scripts wrap the dump
    return ConfigFile(path=path, kind="hf_json", framework=hf_framework(data), data=data)


def _yaml_key_lines(text: str) -> dict[str, int]:
    try:
        node = yaml.compose(text, Loader=yaml.SafeLoader)
    except yaml.YAMLError:
        return {}
    lines: dict[str, int] = {}
    if isinstance(node, yaml.MappingNode):
        for key_node, _ in node.value:
            if isinstance(key_node, yaml.ScalarNode):
                lines.setdefault(str(key_node.value), key_node.start_mark.line + 1)
    return lines


# Axolotl writes the YAML it trained with into the model card it saves beside the adapter (axolotl/train.py,
# setup_model_card): a "See axolotl config" block holding its version line and a ```yaml fence.
_CARD_YAML = re.compile(r"<summary>See axolotl config</summary>.*?^```yaml\n(.*?)^```", re.S | re.M)


def card_yaml(text: str) -> tuple[str, int] | None:
    """The Axolotl YAML a model card (README.md) embeds, and how many lines of the card come before it."""
    m = _CARD_YAML.search(text)
    return (m.group(1), text.count("\n", 0, m.start(1))) if m else None


def is_model_card(path: Path) -> bool:
    return path.suffix.lower() == ".md"


def peek_yaml(path: Path) -> Any:
    """A YAML config's parsed content (a model card's embedded Axolotl YAML), or None where it cannot be read: for
    looking before :func:`read_config`, which reports the errors."""
    try:
        text = path.read_text(encoding="utf-8")
        if is_model_card(path):
            text = (card_yaml(text) or ("", 0))[0]
        return yaml.safe_load(text)
    except (yaml.YAMLError, UnicodeDecodeError, OSError):
        return None


def read_yaml_config(path: Path, framework: str | None = None) -> ConfigFile:
    """An Axolotl or LLaMA-Factory YAML (or a TrainingArguments YAML), or the Axolotl YAML of a model card (its lines
    numbered as the card's)."""
    text, offset = read_text(path), 0
    if is_model_card(path):
        got = card_yaml(text)
        if got is None:
            raise GradianError(
                "no Axolotl config in this model card (no 'See axolotl config' block)",
                where=str(path),
                fix="pass the YAML you trained with",
            )
        text, offset = got
        framework = framework or "axolotl"
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None) or getattr(exc, "context_mark", None)
        problem = getattr(exc, "problem", None) or str(exc).splitlines()[0]
        at = f" at line {mark.line + 1 + offset} column {mark.column + 1}" if mark is not None else ""
        raise GradianError(
            f"YAML syntax error{at}: {problem}",
            where=str(path),
            fix="check the indentation and quoting on that line",
        ) from exc
    data = _mapping(data, path, "training config")
    fw = framework or yaml_framework(data)
    if fw is None:
        raise GradianError(
            "neither an Axolotl nor a LLaMA-Factory config (none of their keys found)",
            where=str(path),
            fix="pass the YAML you trained with (Axolotl: base_model, sequence_len; LLaMA-Factory: "
            "model_name_or_path, finetuning_type)",
        )
    kind = {"axolotl": "axolotl_yaml", "llamafactory": "llamafactory_yaml"}.get(fw, "hf_json")
    if kind == "hf_json":
        fw = hf_framework(data)
    lines = {k: line + offset for k, line in _yaml_key_lines(text).items()}
    return ConfigFile(path=path, kind=kind, framework=fw, data=data, key_lines=lines)


def read_training_args_bin_config(path: Path) -> ConfigFile:
    from gradian.run.pickled_args import read_training_args_bin

    args = read_training_args_bin(path)
    return ConfigFile(
        path=path,
        kind="training_args_bin",
        framework=hf_framework(args.fields, args.class_path),
        data=args.fields,
        class_path=args.class_path,
    )


def read_config(path: str | Path) -> ConfigFile:
    """Any supported config file, by name and content."""
    path = Path(path)
    suffix = path.suffix.lower()
    if path.name.startswith("events.out.tfevents"):
        from gradian.run.logs import read_tensorboard

        tb = read_tensorboard(path)
        if tb.args is None:
            raise GradianError(
                'no "args" text summary in this TensorBoard file',
                where=str(path),
                fix="pass the training config or training_args.bin instead",
            )
        return ConfigFile(path=path, kind="tensorboard_args", framework=hf_framework(tb.args), data=tb.args)
    if suffix == ".bin":
        return read_training_args_bin_config(path)
    if suffix in (".yml", ".yaml", ".md"):
        return read_yaml_config(path)
    if suffix == ".json":
        return read_json_config(path)
    raise GradianError(
        f"unknown config type {suffix or '(no extension)'}",
        where=str(path),
        fix="pass a .json (TrainingArguments / SFTConfig), .yaml (Axolotl / LLaMA-Factory), training_args.bin or the "
        "README.md Axolotl wrote",
    )


def is_candidate_json(path: Path) -> bool:
    """A *.json in a run dir that may be a dumped TrainingArguments (checked by its keys once read)."""
    return path.suffix == ".json" and path.name not in _NOT_CONFIG_JSON and not path.name.startswith("tokenizer")
