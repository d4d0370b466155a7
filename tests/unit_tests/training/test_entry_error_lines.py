"""Command lines the training entry let through to a traceback, to Megatron's failure after GPU set-up, or to a run
that silently did something else than the command line says: each is now one ``error:`` line (exit status 2)."""

import random
import re

import pytest

from megatron.oellm.cards import get_card
from tests.unit_tests.training.entry_helpers import Reached, corpus, entry_up_to_pretrain, one_error_line

CARD = "qwen3-30b-a3b-tiny"
BASE = ["--oellm-model", CARD, "--oellm-backend", "torch", "--tokenizer-type", "NullTokenizer", "--seq-length", "128"]


@pytest.mark.parametrize("flag, value", [("--attention-backend", "flashh"), ("--exit-signal", "SIGNOPE"),
                                         ("--cuda-graph-scope", "attnn")])
def test_a_bad_value_of_an_enum_flag_is_one_error_line(monkeypatch, capsys, flag, value):
    """megatron's enum-typed flags raise KeyError from argparse, which the entry let out as a traceback."""
    entry = entry_up_to_pretrain(monkeypatch)
    assert entry.main([*BASE, "--mock-data", flag, value]) == 2
    assert f"invalid value {value!r} for {flag}" in one_error_line(capsys)


def test_an_unknown_flag_is_one_error_line_not_megatrons_whole_usage(monkeypatch, capsys):
    """argparse printed Megatron's usage (hundreds of lines, on every rank) before the error."""
    entry = entry_up_to_pretrain(monkeypatch)
    assert entry.main([*BASE, "--mock-data", "--oellm-modle", CARD]) == 2
    assert "unrecognized arguments: --oellm-modle" in one_error_line(capsys)


def test_yaml_cfg_is_refused(monkeypatch, capsys, tmp_path):
    """megatron's --yaml-cfg replaces every command-line argument (the card's, --oellm-model's) by the file's."""
    entry = entry_up_to_pretrain(monkeypatch)
    (tmp_path / "run.yaml").write_text("num_layers: 2\n")
    assert entry.main([*BASE, "--mock-data", "--yaml-cfg", str(tmp_path / "run.yaml")]) == 2
    assert "--yaml-cfg" in one_error_line(capsys)


@pytest.mark.parametrize("sources", [
    ("mock", "data-args"),  # megatron-core builds MockGPTDatasets and ignores the file
    ("mock", "per-split-args"),
    ("data-path", "per-split-args"),  # the per-split file is ignored
    ("data-args", "train"),  # the per-split paths are ignored
    ("mock", "data-path"),  # validate_args' assertion traceback
    ("data-path", "train"),
    ("data-path", "data-args"),
])
def test_two_data_sources_are_refused(monkeypatch, capsys, tmp_path, sources):
    entry = entry_up_to_pretrain(monkeypatch)
    prefix = corpus(tmp_path, "train")
    (tmp_path / "args.txt").write_text(prefix)
    (tmp_path / "split.json").write_text(f'{{"train": "{prefix}", "valid": "{prefix}", "test": "{prefix}"}}')
    flags = {"mock": ["--mock-data"], "data-args": ["--data-args-path", str(tmp_path / "args.txt")],
             "per-split-args": ["--per-split-data-args-path", str(tmp_path / "split.json")],
             "data-path": ["--data-path", prefix, "--split", "1,1,0"], "train": ["--train-data-path", prefix]}
    assert entry.main([*BASE, *flags[sources[0]], *flags[sources[1]]]) == 2
    assert "one data source" in one_error_line(capsys)
    with pytest.raises(Reached):
        entry.main([*BASE, *flags[sources[1]], *(["--split", "1,1,0"] if sources[1] == "data-args" else [])])


@pytest.mark.parametrize("flag, named", [("--data-path", "--data-path"),
                                         ("--train-data-path", "--train/valid/test-data-path")])
def test_mock_data_beside_a_data_path_flag_without_a_value_is_refused(monkeypatch, capsys, flag, named):
    """``--data-path $DATA`` with an empty shell variable parses as ``[]``, which megatron's ``validate_args`` reads as
    no data path: beside ``--mock-data`` the run trained on mock tokens instead of the data the command line names."""
    entry = entry_up_to_pretrain(monkeypatch)
    assert entry.main([*BASE, "--mock-data", flag]) == 2
    line = one_error_line(capsys)
    assert f"--mock-data and {named}: give one data source" in line


def test_seq_length_above_the_cards_positions_is_one_error_line(monkeypatch, capsys):
    """Megatron's validate_args asserts it (a traceback per rank); the card's value is not on the command line."""
    entry = entry_up_to_pretrain(monkeypatch)
    limit = get_card(CARD).max_position_embeddings
    seq = random.randint(limit + 1, 4 * limit)
    argv = ["--oellm-model", CARD, "--oellm-backend", "torch", "--tokenizer-type", "NullTokenizer", "--mock-data"]
    assert entry.main([*argv, "--seq-length", str(seq)]) == 2
    line = one_error_line(capsys)
    assert f"--seq-length {seq}" in line and str(limit) in line
    with pytest.raises(Reached):
        entry.main([*argv, "--seq-length", str(random.randint(8, limit // 8) * 8)])


def test_seq_length_equal_to_the_cards_positions_is_let_through(monkeypatch):
    """megatron's validate_args asserts ``max_position_embeddings >= seq_length``: the card's full length trains."""
    entry = entry_up_to_pretrain(monkeypatch)
    limit = get_card(CARD).max_position_embeddings
    with pytest.raises(Reached):
        entry.main(["--oellm-model", CARD, "--oellm-backend", "torch", "--tokenizer-type", "NullTokenizer", "--mock-data", "--seq-length", str(limit)])


def test_megatrons_validation_assertion_is_one_error_line(monkeypatch, capsys):
    """validate_args refuses by ``assert`` (before any GPU is set up); under torchrun a traceback per rank."""
    import megatron.training.arguments

    entry = entry_up_to_pretrain(monkeypatch)
    message = f"validation refusal {random.randint(0, 10**6)}"

    def refuse(**_kwargs):
        raise AssertionError(message)

    monkeypatch.setattr(megatron.training.arguments, "parse_and_validate_args", refuse)
    assert entry.main([*BASE, "--mock-data"]) == 2
    assert message in one_error_line(capsys)


def test_data_args_path_without_split_is_refused(monkeypatch, capsys, tmp_path):
    """validate_args gives --data-path a default split, not --data-args-path: megatron-core's dataset config then
    asserted "split must be provided" after the model and optimizer were set up."""
    entry = entry_up_to_pretrain(monkeypatch)
    (tmp_path / "args.txt").write_text(corpus(tmp_path, "train"))
    argv = [*BASE, "--data-args-path", str(tmp_path / "args.txt")]
    assert entry.main(argv) == 2
    assert "--split" in one_error_line(capsys)
    weight = random.randint(1, 99)  # train and validation one of the corpus' two documents each
    with pytest.raises(Reached):
        entry.main([*argv, "--split", f"{weight},{weight},0"])


@pytest.mark.parametrize("split", ["1,2,3,4", "0,0,0", "train,valid"])
def test_a_split_megatron_cannot_use_is_refused(monkeypatch, capsys, tmp_path, split):
    """An unusable --split failed (or gave NaN split bounds) in the dataset builder, after GPU set-up."""
    entry = entry_up_to_pretrain(monkeypatch)
    assert entry.main([*BASE, "--data-path", corpus(tmp_path, "train"), "--split", split]) == 2
    assert f"--split {split!r}" in one_error_line(capsys)


def test_split_beside_per_split_paths_is_refused(monkeypatch, capsys, tmp_path):
    """megatron-core's dataset config asserts "split and blend_per_split are incompatible" after GPU set-up."""
    entry = entry_up_to_pretrain(monkeypatch)
    prefix = corpus(tmp_path, "train")
    argv = [*BASE, "--train-data-path", prefix, "--valid-data-path", prefix]
    assert entry.main([*argv, "--split", "98,2,0"]) == 2
    assert "--split" in one_error_line(capsys)
    with pytest.raises(Reached):
        entry.main(argv)


def test_help_still_prints_once(monkeypatch, capsys):
    """``--help`` returns 0 with the usage on stdout: the parse that refuses a bad command line must not refuse it."""
    entry = entry_up_to_pretrain(monkeypatch)
    status = entry.main(["--help"])
    out = capsys.readouterr()
    assert status == 0 and out.out.count("usage:") == 1 and "--oellm-model" in out.out and not out.err


def test_a_multi_line_validation_message_is_one_error_line(monkeypatch, capsys):
    import megatron.training.arguments

    entry = entry_up_to_pretrain(monkeypatch)

    def refuse(**_kwargs):
        raise AssertionError("first line\n    second line")

    monkeypatch.setattr(megatron.training.arguments, "parse_and_validate_args", refuse)
    assert entry.main([*BASE, "--mock-data"]) == 2
    assert "first line second line" in one_error_line(capsys)


def test_a_bare_validation_assertion_names_its_condition(monkeypatch, capsys, tmp_path):
    """Most of validate_args' asserts have no message: the refusal names the failed condition instead."""
    import importlib.util

    import megatron.training.arguments

    entry = entry_up_to_pretrain(monkeypatch)
    heads = random.randint(3, 64)
    (tmp_path / "validation.py").write_text(f"def refuse(**_kwargs):\n    assert {heads} % 2 == 7\n")
    spec = importlib.util.spec_from_file_location("validation", tmp_path / "validation.py")
    module = importlib.util.module_from_spec(spec)  # outside pytest's assertion rewriting, like megatron's asserts
    spec.loader.exec_module(module)
    monkeypatch.setattr(megatron.training.arguments, "parse_and_validate_args", module.refuse)
    assert entry.main([*BASE, "--mock-data"]) == 2
    assert f"refuses the command line: assert {heads} % 2 == 7" in one_error_line(capsys)


@pytest.mark.parametrize("statement, refused", [
    ("assert spec[0] == 'local', '--attention-backend local is only supported with --spec local'", True),
    ("return spec[0] == 'local'", False)])
def test_a_type_error_inside_a_validation_assertion_is_one_error_line(monkeypatch, capsys, tmp_path, statement,
                                                                      refused):
    """megatron's ``assert args.spec[0] == 'local', ...`` raises TypeError on ``--spec`` unset: the assertion is the
    refusal, named with its message. A TypeError elsewhere is a defect and keeps its traceback."""
    import importlib.util

    import megatron.training.arguments

    entry = entry_up_to_pretrain(monkeypatch)
    (tmp_path / "validation.py").write_text(f"def refuse(**_kwargs):\n    spec = None\n    {statement}\n")
    spec = importlib.util.spec_from_file_location("validation", tmp_path / "validation.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    monkeypatch.setattr(megatron.training.arguments, "parse_and_validate_args", module.refuse)
    if refused:
        assert entry.main([*BASE, "--mock-data"]) == 2
        assert "refuses the command line: assert spec[0] == 'local'" in one_error_line(capsys)
        return
    with pytest.raises(TypeError):
        entry.main([*BASE, "--mock-data"])



def test_a_runtime_error_without_a_message_keeps_its_traceback(monkeypatch):
    """A ``RuntimeError`` from megatron's validation is a refusal when it says something (``--non-persistent-ckpt-type
    local`` without nvidia-resiliency-ext); one without a message names nothing to fix: it is a defect and keeps its
    traceback, not an ``error:`` line ending in an empty refusal."""
    import megatron.training.arguments

    from megatron.oellm.training.startup_checks import refusal_detail

    assert refusal_detail(RuntimeError()) is None
    entry = entry_up_to_pretrain(monkeypatch)

    def fail(**_kwargs):
        raise RuntimeError()

    monkeypatch.setattr(megatron.training.arguments, "parse_and_validate_args", fail)
    with pytest.raises(RuntimeError):
        entry.main([*BASE, "--mock-data"])

RECOMPUTE = ["--recompute-granularity", "full", "--recompute-method"]


@pytest.mark.parametrize("flag, beside, below", [
    ("--log-interval", [], "zero"),  # `iteration % log_interval` at the first iteration
    ("--log-interval", [], "negative"),  # megatron's timers assert a positive normalizer at the first log line
    ("--eval-interval", ["--eval-iters", "EVAL_ITERS"], "zero"),  # the validation sample count divides by it
    ("--eval-interval", ["--eval-iters", "0"], "zero"),  # ... also without validation
    ("--log-memory-interval", [], "zero"),
    ("--gpu-sniff-test-interval", [], "zero"),
    ("--tensorboard-log-interval", ["--tensorboard-dir", "TB_DIR"], "zero"),
    ("--recompute-num-layers", [*RECOMPUTE, "uniform"], "zero"),  # the layer loop steps by 0: never ends
    ("--recompute-num-layers", [*RECOMPUTE, "uniform"], "negative"),
    ("--recompute-num-layers", [*RECOMPUTE, "block"], "negative"),  # no layer recomputed
])
def test_an_interval_or_recompute_count_megatron_divides_or_steps_by_is_one_error_line(monkeypatch, capsys, tmp_path,
                                                                                      flag, beside, below):
    """megatron-core's validate_args passes these; the job stopped (a ZeroDivisionError, an assertion) or hung (full
    uniform recompute stepping through the layers by 0) only once it trained, after its wait in the queue."""
    entry = entry_up_to_pretrain(monkeypatch)
    beside = [{"EVAL_ITERS": str(random.randint(1, 50)), "TB_DIR": str(tmp_path / "tb")}.get(token, token)
              for token in beside]
    bad = 0 if below == "zero" else -random.randint(1, 50)
    assert entry.main([*BASE, "--mock-data", *beside, flag, str(bad)]) == 2
    assert f"error: {flag} {bad}: " in one_error_line(capsys)
    with pytest.raises(Reached):
        entry.main([*BASE, "--mock-data", *beside, flag, str(random.randint(1, 2))])


def megatrons_refusal(argv: list[str], world_size: int) -> AssertionError:
    """What megatron-core's own ``validate_args`` raises for ``argv`` on rank 0 of ``world_size`` GPUs (run on the
    CPU as ``oellm recipe`` runs it)."""
    from megatron.oellm.recipes.megatron_validation import validate_on_cluster

    with pytest.raises(AssertionError) as refused:
        validate_on_cluster(argv, world_size, {})
    return refused.value


def test_a_training_batch_off_the_micro_batch_grid_is_named_as_the_training_batch(monkeypatch, capsys):
    """megatron-core checks --global-batch-size against --micro-batch-size first through the evaluation batch sizes
    they default to, so its refusal named ``eval_global_batch_size``, a flag the command line never set (or set to
    the training values). Where the evaluation batch is the command line's own (another size), or the training batch
    may be rounded down (``--decrease-batch-size-if-needed``), the refusal is about the evaluation batch and stays as
    megatron says. megatron's refusal is its own (its validate_args on the CPU), passed to the entry, whose
    validation needs CUDA."""
    import megatron.training.arguments

    data_parallel = random.choice([1, 2, 4])
    micro = random.randint(2, 8)
    samples = micro * data_parallel
    batch = samples * random.randint(0, 20) + random.randint(1, samples - 1)  # below one step's samples too
    sizes = ["--global-batch-size", str(batch), "--micro-batch-size", str(micro)]
    own_eval = str(batch + 1 if (batch + 1) % samples else batch + 2)  # off the grid, so megatron refuses it
    for extra, renamed in (([], True), (["--eval-micro-batch-size", str(micro)], True),
                           (["--eval-global-batch-size", str(batch)], True),
                           (["--eval-global-batch-size", own_eval], False),
                           (["--decrease-batch-size-if-needed"], False)):
        refusal = megatrons_refusal([*BASE, "--mock-data", *sizes, *extra], data_parallel)
        entry = entry_up_to_pretrain(monkeypatch)

        def refuse(refusal=refusal, **_kwargs):
            raise refusal

        monkeypatch.setattr(megatron.training.arguments, "parse_and_validate_args", refuse)
        assert entry.main([*BASE, "--mock-data", *sizes, *extra]) == 2
        line = one_error_line(capsys)
        if not renamed:
            assert "eval_global_batch_size (" in line and f"eval_micro_batch_size ({micro})" in line, (extra, line)
            continue
        assert (f"--global-batch-size {batch} is not a multiple of --micro-batch-size {micro} x data-parallel "
                f"size {data_parallel} = {samples}: ") in line and "eval" not in line, (extra, line)
        suggested = int(re.search(r"\(e\.g\. (\d+)\)", line).group(1))
        assert suggested > 0 and suggested % samples == 0 and abs(suggested - batch) <= samples, (batch, line)


def test_a_training_batch_megatron_validates_through_other_evaluation_sizes_is_refused_at_the_entry(monkeypatch,
                                                                                                   capsys):
    """With evaluation sizes of its own on the grid, megatron's validate_args passes a training batch off the grid,
    and its micro-batch calculator stopped every rank after start-up; the entry refuses it in one line."""
    entry = entry_up_to_pretrain(monkeypatch)
    micro = random.randint(2, 8)
    batch = micro * random.randint(1, 20) + random.randint(1, micro - 1)
    evaluation = ["--micro-batch-size", str(micro), "--eval-global-batch-size", str(micro * random.randint(1, 20))]
    assert entry.main([*BASE, "--mock-data", "--global-batch-size", str(batch), *evaluation]) == 2
    assert (f"--global-batch-size {batch} is not a multiple of --micro-batch-size {micro} x data-parallel size 1 = "
            f"{micro}: "
            "every step runs a whole number of micro-batches") in one_error_line(capsys)
    with pytest.raises(Reached):
        entry.main([*BASE, "--mock-data", "--global-batch-size", str(batch - batch % micro), *evaluation])


def test_megatron_refuses_fp16_beside_bf16_with_a_bare_assert_the_entry_refuses_first():
    """The claim behind the entry's --fp16/--bf16 refusal (patches/validate-args-bare-asserts.md): megatron's own
    validate_args stops on an assert that names no flag; the entry's parsed-arguments check refuses it first."""
    from megatron.oellm.recipes.megatron_validation import validate_args_on_cluster
    from megatron.oellm.training.args import parse_oellm_argv
    from megatron.oellm.training.startup_checks import check_parsed_args, refusal_detail

    argv = [*BASE, "--mock-data", "--micro-batch-size", "1", *random.sample(["--fp16", "--bf16"], 2)]
    with pytest.raises(AssertionError) as refused:
        validate_args_on_cluster(parse_oellm_argv(argv), 1, {})
    assert refusal_detail(refused.value) == "assert not args.bf16"
    with pytest.raises(ValueError, match="--fp16 and --bf16 together"):
        check_parsed_args(parse_oellm_argv(argv))
