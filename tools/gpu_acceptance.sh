#!/bin/bash
# One-GPU acceptance stages, written for 10-minute device calls:
#   tests  every GPU test (fla's GDN kernel vs the float64 recurrence, the runtime patches, backends, parity with
#          transformers, model training, the entry end to end, the bench harness), one pytest process per test
#          folder, side by side, one log each; a folder none of whose tests passed (all skipped or deselected)
#          fails;
#   train  the MN5 recipes' `--local` runs on offline real text (byte-tokenized Python standard library): Qwen3.5
#          30 iterations saving a checkpoint, a resume to 35, `oellm table` of the log and of a truncated copy;
#          beside it the Qwen3-30B-A3B recipe, 30 iterations;
#   resume a short save (iterations 3 and 6) + resume (to 8) of the Qwen3.5 recipe's `--local` run;
#   interrupt  Ctrl-C (SIGINT to its process group, as a terminal sends it) at iteration 3 of the Qwen3.5 recipe's
#          `--local` run (tools/check_interrupt.py): it must end with status 130 and leave no rank running;
#   bench  `oellm bench` (Qwen3.5 proxy, ours vs transformers; the sides OELLM_BENCH_SIDES names, default ours,hf,
#          e.g. ours,te,hf with Transformer Engine on the path) with a one-step profile of each side at its best
#          micro-batch size. Run it alone: it times the GPU.
#
#   tools/gpu_acceptance.sh OUT_DIR STAGE[,STAGE...] [BENCH_MBS]   # needs megatron-core, fla, tilelang on the path
#   OUT_DIR: a new or empty folder, apart from OELLM_WORK, not holding OELLM_KERNEL_CACHE, not in its tilelang/, not
#   its triton/ (at the end its logs are packed into OUT_DIR/logs.tar.xz and removed)
#   Exit status: 0 when `oellm doctor`, each corpus build and every run of every stage returned 0, 1 when one did not
#   (OUT_DIR/summary.txt names it) or summary.txt is missing, 2 on bad arguments or when python3's torch sees no CUDA
#   device, 130 on Ctrl-C (SIGINT) and 143 on SIGTERM: the runs still going get SIGTERM (SIGKILL 20 s later), no
#   further run starts, and once they have ended summary.txt says "interrupted by SIG..." and the logs are packed.
#   Environment: OELLM_STAGE_LIMIT_S (seconds per stage, default 480), OELLM_TEST_FOLDERS (the tests stage's folders
#   to run, FOLDER[,FOLDER...] of layers, patches, backends, training, bench, models; default all), OELLM_KERNEL_CACHE (Triton and TileLang
#   caches, default /tmp/oellm-kernel-cache), OELLM_WORK (the corpora and runs of the train, resume and interrupt
#   stages, deleted and rebuilt by them; default /tmp/oellm-acceptance; a non-empty folder this script did not make
#   is refused; its runs/, short/ and interrupt/ may not hold OELLM_KERNEL_CACHE, nor the cache's tilelang/
#   OELLM_WORK). Relative paths are read from the folder the script is called from.
#
# Stages given together run side by side (correctness and loss need no exclusive GPU; a table made while other
# stages share the GPU says so in OUT_DIR/summary.txt). On an 80 GB H100, tests,train,interrupt together ran the train
# stage's resume out of memory and, on a fresh machine, the slower test folders past 420 s, and tests,interrupt ran
# the parity tests out of memory: there, give tests alone, then train,interrupt (a GPU under 100 GiB with tests and
# another stage gets a warning at the start and in OUT_DIR/summary.txt). On such a GPU the tests stage runs the models
# folder (the real-width parity tests hold about 45 GiB) after the other folders, not beside them: all six side by
# side ran it and the entry's GPU test out of memory on an 80 GB H100. Kernel caches: fla's Triton kernels autotune and
# TileLang JIT-compiles on first use (minutes on a fresh machine). OUT_DIR/kernel-cache.tar.xz keeps what is small and
# saves the most: TileLang's kernels and Triton's autotuning choices (each kernel is then compiled once, in its chosen
# configuration, instead of in every candidate). Copy it to .bundle/kernel-cache/ and carry that folder: it is restored
# on the next call. A fresh machine without it does not fit the tests stage in one 10-minute call (sessions 52 and 60):
# split it, OELLM_TEST_FOLDERS=layers,patches,backends,bench first (it compiles the kernels; carry its archive), then
# OELLM_TEST_FOLDERS=training,models.
set -o pipefail
USAGE="usage: tools/gpu_acceptance.sh OUT_DIR STAGE[,STAGE...] [BENCH_MBS]"
USAGE+="  (stages: tests, train, resume, interrupt, bench)"
if [[ ${1:-} == -h || ${1:-} == --help ]]; then
  awk 'NR > 1 { if (!/^#/) exit; print }' "$0"  # this header: the stages, exit statuses and environment
  exit 0
fi
if [ $# -lt 2 ] || [ $# -gt 3 ] || [ -z "$1" ] || [ -z "$2" ] || [[ $1 == -* ]]; then
  echo "$USAGE" >&2
  exit 2
fi
OUT_DIR=$(realpath -m "$1")
STAGES=$2
BENCH_MBS=${3:-1,2,4}
LIMIT_S=${OELLM_STAGE_LIMIT_S:-480}  # one stage; a 10-minute call leaves room for the start and the caches
# absolute, as OUT_DIR: the script runs from the repository root, and its messages name these folders
CACHE=$(realpath -m "${OELLM_KERNEL_CACHE:-/tmp/oellm-kernel-cache}")
WORK=$(realpath -m "${OELLM_WORK:-/tmp/oellm-acceptance}")
# the stages time out at LIMIT_S (the tests stage's two waves on a small GPU together), LIMIT_S/2 and
# 2*LIMIT_S/3; `timeout 0` (bash arithmetic reads a non-number as 0)
# sets no limit, and a stage that overruns the device call is killed before its logs are packed
KILL_AFTER_S=20  # a run still going this long after its SIGTERM (its limit, or an interrupt) gets SIGKILL
if ! [[ $LIMIT_S =~ ^[1-9][0-9]{0,6}$ ]] || [ "$LIMIT_S" -lt 2 ]; then  # 7 digits (115 days); 20 overflowed bash
  echo "error: OELLM_STAGE_LIMIT_S must be a whole number of seconds from 2 to 9999999, got '$LIMIT_S'" >&2
  exit 2
fi
# an empty item (a stray comma) or a stage given twice: two copies of a stage would run side by side, writing the
# same logs and summary lines and removing each other's runs
if [[ $STAGES == ,* || $STAGES == *, || $STAGES == *,,* ]]; then
  echo "error: empty stage name in '$STAGES' (a stray comma); give STAGE[,STAGE...]" >&2
  exit 2
fi
IFS=, read -r -a selected <<< "$STAGES"
seen=","
for stage in "${selected[@]}"; do
  case $stage in
    tests|train|resume|interrupt|bench) ;;
    *) echo "unknown stage '$stage' (tests, train, resume, interrupt, bench)" >&2; exit 2 ;;
  esac
  [[ $seen != *",$stage,"* ]] || { echo "error: stage '$stage' given twice in '$STAGES'; give each once" >&2; exit 2; }
  seen="$seen$stage,"
done
# the tests stage's folders: a subset splits the stage over calls (a fresh machine compiles every kernel first)
TEST_FOLDER_NAMES="layers,patches,backends,training,bench,models"
TEST_FOLDERS=${OELLM_TEST_FOLDERS-$TEST_FOLDER_NAMES}
if [ -n "${OELLM_TEST_FOLDERS+set}" ] && [[ $seen != *,tests,* ]]; then
  echo "error: OELLM_TEST_FOLDERS chooses folders of the tests stage, which '$STAGES' does not run; add tests or" \
       "unset it" >&2
  exit 2
fi
if [ $# -eq 3 ] && [[ $seen != *,bench,* ]]; then
  echo "error: BENCH_MBS '$3' sets the bench stage's micro-batch sizes, which '$STAGES' does not run; add bench or" \
       "leave it out" >&2
  exit 2
fi
if [[ -z $TEST_FOLDERS || $TEST_FOLDERS == ,* || $TEST_FOLDERS == *, || $TEST_FOLDERS == *,,* ]]; then
  echo "error: OELLM_TEST_FOLDERS='$TEST_FOLDERS' has an empty folder name; give FOLDER[,FOLDER...] of" \
       "$TEST_FOLDER_NAMES" >&2
  exit 2
fi
IFS=, read -r -a test_folders <<< "$TEST_FOLDERS"
seen_folders=","
for folder in "${test_folders[@]}"; do
  [[ ,$TEST_FOLDER_NAMES, == *",$folder,"* ]] ||
    { echo "error: OELLM_TEST_FOLDERS names '$folder', not a test folder of the stage ($TEST_FOLDER_NAMES)" >&2; exit 2; }
  [[ $seen_folders != *",$folder,"* ]] ||
    { echo "error: OELLM_TEST_FOLDERS names '$folder' twice; give each once" >&2; exit 2; }
  seen_folders="$seen_folders$folder,"
done
# Whether the tests stage runs the test folder $1 (OELLM_TEST_FOLDERS).
wanted() {
  [[ $seen_folders == *",$1,"* ]]
}
# a GPU under 100 GiB (an 80 GB H100): the parity tests ran out of memory beside the interrupt stage, and beside the
# other test folders. The tests stage then runs the models folder last, alone; beside another stage it gets a warning,
# as an H100 may have the memory free when the other stage is small.
SHARING_WARNING=""
SMALL_GPU=0
if [[ $seen == *,tests,* ]]; then
  gpu_mib=$(nvidia-smi --query-gpu=memory.total --format=csv,noheader,nounits -i 0 2>/dev/null | head -1)
  [[ $gpu_mib =~ ^[0-9]+$ ]] && [ "$gpu_mib" -lt 102400 ] && SMALL_GPU=1
fi
if [ "$SMALL_GPU" = 1 ] && [ ${#selected[@]} -gt 1 ]; then
  SHARING_WARNING="warning: stages $STAGES side by side on a GPU of $gpu_mib MiB: on an 80 GB H100 the tests"
  SHARING_WARNING+=" stage's parity tests ran out of memory beside the interrupt stage; give tests alone, then the rest"
  echo "$SHARING_WARNING" >&2
fi
# the end of the run packs everything in OUT_DIR into logs.tar.xz and deletes it: never do that to a user's files
if [ -e "$OUT_DIR" ] && [ ! -d "$OUT_DIR" ]; then
  echo "error: OUT_DIR $OUT_DIR is a file, not a folder; give a new or empty folder" >&2
  exit 2
fi
if [ -n "$(ls -A "$OUT_DIR" 2>/dev/null)" ]; then
  echo "error: OUT_DIR $OUT_DIR is not empty; its contents would be packed into logs.tar.xz and deleted." \
       "Give a new or empty folder" >&2
  exit 2
fi
# Whether the absolute folder $1 is one of the folders after it or lies in one.
within() {
  local folder=$1 holder
  shift
  for holder; do
    [[ $folder == "$holder" || $folder == "${holder%/}"/* ]] && return 0
  done
  return 1
}
# Whether the absolute folders $1 and $2 are one folder or one holds the other.
overlap() {
  within "$1" "$2" || within "$2" "$1"
}
# the stages delete and rebuild folders in WORK, and the end packs and deletes OUT_DIR's contents: neither may hold
# the other
if overlap "$OUT_DIR" "$WORK"; then
  echo "error: OUT_DIR $OUT_DIR and OELLM_WORK $WORK overlap (the stages delete and rebuild folders in OELLM_WORK," \
       "and the end packs and deletes OUT_DIR's contents); give OUT_DIR outside OELLM_WORK and apart from it" >&2
  exit 2
fi
# The end packs and deletes OUT_DIR's contents, then archives the cache's tilelang/ and the autotuning choices in its
# triton/ (the kernel-cache archive); the train, resume and interrupt stages delete WORK's runs/, short/ and
# interrupt/ (corpus/ is only written over, file by file). Only these overlaps lose or misplace files: a cache in
# OUT_DIR, or an OUT_DIR that is the cache's triton/, is deleted before its archive is made; a cache in a deleted
# folder of WORK goes with it; an OUT_DIR or WORK in the cache's tilelang/ is archived with it.
TILELANG="${CACHE%/}/tilelang"
if within "$CACHE" "$OUT_DIR" || within "$OUT_DIR" "$TILELANG" || [[ $OUT_DIR == "${CACHE%/}/triton" ]]; then
  echo "error: OUT_DIR $OUT_DIR and OELLM_KERNEL_CACHE $CACHE overlap (the end packs and deletes OUT_DIR's contents," \
       "then archives the cache's tilelang/ and triton/ autotuning choices); give OUT_DIR apart from them" >&2
  exit 2
fi
if within "$CACHE" "${WORK%/}"/{runs,short,interrupt} || within "$WORK" "$TILELANG"; then
  echo "error: OELLM_KERNEL_CACHE $CACHE and OELLM_WORK $WORK overlap (the stages delete OELLM_WORK's runs/, short/" \
       "and interrupt/, and the end archives the cache's tilelang/); give them apart" >&2
  exit 2
fi
cd "$(dirname "$0")/.."  # the test folders, recipes and .bundle/ are named from the repository root
# `python3 tools/X.py` puts tools/, not the checkout, on sys.path: megatron.oellm is imported from this checkout
# whether or not it is installed, ahead of what the caller put on PYTHONPATH
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"
# the train, resume and interrupt stages delete and rebuild runs/, short/, interrupt/ and corpus/ in WORK: only in
# a folder this script made
WORK_MARK="$WORK/.oellm-acceptance-work"
if [ -e "$WORK" ] && { [ ! -d "$WORK" ] || { [ -n "$(ls -A "$WORK" 2>/dev/null)" ] && [ ! -e "$WORK_MARK" ]; }; }; then
  echo "error: OELLM_WORK $WORK holds files and no mark of this script (its stages delete and rebuild runs/, short/" \
       "and corpus/ in it); give a new or empty folder, or, if a version of this script before the mark made it" \
       "(runs/, short/, corpus/ only), remove it: rm -rf $WORK" >&2
  exit 2
fi
# without a CUDA device every GPU test is skipped and pytest returns 0: refuse rather than report a pass
CUDA_COUNT='import torch; print("CUDA devices:", torch.cuda.device_count() if torch.cuda.is_available() else 0)'
cuda_check=$(python3 -c "$CUDA_COUNT" 2>&1)
if ! grep -qE '^CUDA devices: [1-9]' <<< "$cuda_check"; then
  echo "error: python3's torch sees no CUDA device ($(tail -1 <<< "$cuda_check")): the GPU tests would all be" \
       "skipped; run this on a machine with a GPU" >&2
  exit 2
fi
if ! mkdir -p "$OUT_DIR" "$CACHE" "$WORK" 2>/dev/null || [ ! -w "$OUT_DIR" ] || ! touch "$WORK_MARK" 2>/dev/null; then
  echo "error: cannot write to OUT_DIR $OUT_DIR (or the caches $CACHE, $WORK); give a folder you can write" >&2
  exit 2
fi
[ -f .bundle/kernel-cache/kernel-cache.tar.xz ] && tar -xJf .bundle/kernel-cache/kernel-cache.tar.xz -C "$CACHE"
export PYTHONUNBUFFERED=1 PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True HF_HUB_OFFLINE=1
export TRITON_CACHE_DIR="$CACHE/triton" TRITON_CACHE_AUTOTUNING=1 TILELANG_CACHE_DIR="$CACHE/tilelang"
# What comes back from a device call is at most 8 files of 16 MiB: the summary, every log in one archive, and the
# kernel-cache archive (TileLang + Triton autotuning choices; Triton's compiled kernels are hundreds of MB).
pack_results() {
  local archive
  trap '' INT TERM  # a half-packed OUT_DIR would lose logs: packing takes seconds, let it finish
  rm -rf "$RUNNING"  # the record of runs in progress: none is left
  archive=$(mktemp /tmp/oellm-logs.XXXXXX)  # outside OUT_DIR while it is packed; one per run
  (cd "$OUT_DIR" && tar -cJf "$archive" --exclude=summary.txt . \
    && find . -mindepth 1 -not -name summary.txt -delete && chmod 644 "$archive" && mv "$archive" logs.tar.xz)
  rm -f "$archive"
  # each cache folder's size; an empty cache has none (its unmatched glob was du's "cannot access" in the summary)
  find "$CACHE" -mindepth 1 -maxdepth 1 -exec du -sh {} + >> "$OUT_DIR/summary.txt" 2>&1
  (cd "$CACHE" && { find tilelang -type f 2>/dev/null; find triton -name '*.autotune.json' 2>/dev/null; } \
    | tar -cJf "$OUT_DIR/kernel-cache.tar.xz" -T -)
  if [ "$(stat -c %s "$OUT_DIR/kernel-cache.tar.xz")" -gt $((15 * 1024 * 1024)) ]; then
    rm -f "$OUT_DIR/kernel-cache.tar.xz"
    echo "kernel-cache archive over 15 MiB: not kept" >> "$OUT_DIR/summary.txt"
  fi
}
# Runs in progress: a file named after the PID of each one's `timeout` (run_bounded), and `stop` once interrupted.
RUNNING=$(mktemp -d /tmp/oellm-acceptance-runs.XXXXXX)
stage_pids=()

# Run "${@:2}" (LIMIT COMMAND...) under `timeout`, its output to the log $1, recorded in RUNNING while it runs so an
# interrupt can stop it: `timeout` puts the command in a process group of its own, which the terminal's Ctrl-C does
# not reach. Once the script is interrupted no run starts (status 143). It runs in the background so that the INT/TERM
# trap runs at once (`wait` returns to it), and not inside this function's redirection.
run_bounded() {
  [ -e "$RUNNING/stop" ] && { echo "not started: the script was interrupted" > "$1"; return 143; }
  timeout -k "$KILL_AFTER_S" "${@:2}" > "$1" 2>&1 &
  local pid=$! rc
  : > "$RUNNING/$pid"
  [ -e "$RUNNING/stop" ] && kill -TERM "$pid" 2>/dev/null  # started while the trap was listing the runs
  wait "$pid"
  rc=$?
  rm -f "$RUNNING/$pid"
  return "$rc"
}

# Whether any of the processes "$@" is still running.
any_running() {
  local pid
  for pid; do kill -0 "$pid" 2>/dev/null && return 0; done
  return 1
}

# OUT_DIR/summary.txt (and stdout): the doctor's warnings and what each stage printed.
summarise() {
  {
    [ "${#selected[@]}" -gt 1 ] && echo "stages ${STAGES} ran side by side on one GPU: their timings are not exclusive"
    [ -n "$SHARING_WARNING" ] && echo "$SHARING_WARNING"
    grep -E "^ +\[(warning|error)\]" "$OUT_DIR/doctor.txt"; tail -1 "$OUT_DIR/doctor.txt"
    echo "oellm doctor: rc ${DOCTOR_RC:-(not finished)}"
    for stage in "${selected[@]}"; do
      echo "== $stage"; cat "$OUT_DIR/stage_$stage.txt" 2>/dev/null || echo "not started"
    done
  } | tee "$OUT_DIR/summary.txt"
}

# The INT/TERM trap: stop every run (SIGTERM to its `timeout`, which passes it on to the run's process group), wait
# for the runs and stages to end (bounded: SIGKILL follows after KILL_AFTER_S), summarise what they printed, say why
# the script stopped, and exit $2; the EXIT trap then packs the logs.
stop_on_signal() {
  trap '' INT TERM  # a second Ctrl-C must not cut the stopping short
  : > "$RUNNING/stop"
  local runs deadline=$((SECONDS + KILL_AFTER_S + 10))
  mapfile -t runs < <(ls "$RUNNING" | grep -E '^[0-9]+$')
  [ "${#runs[@]}" -gt 0 ] && kill -TERM "${runs[@]}" 2>/dev/null
  while any_running "${runs[@]}" "${stage_pids[@]}" && [ "$SECONDS" -lt "$deadline" ]; do sleep 0.2; done
  summarise
  echo "interrupted by SIG$1: the runs still going were stopped and no further run started" \
    | tee -a "$OUT_DIR/summary.txt" >&2
  exit "$2"
}
trap pack_results EXIT
trap 'stop_on_signal INT 130' INT
trap 'stop_on_signal TERM 143' TERM
run_bounded "$OUT_DIR/doctor.txt" "$LIMIT_S" python3 -m megatron.oellm doctor
DOCTOR_RC=$?  # 1 on a check's error, or a crash: fails the acceptance as any run does

# pytest of one test folder within $3 seconds; a test still running after 240 s dumps every thread's stack into the log.
# A folder that returned 0 with no test passed (all skipped or deselected) fails: its GPU tests did not run.
gpu_pytest() {
  run_bounded "$OUT_DIR/pytest_$1.log" "$3" \
    python3 -m pytest -q -s -p no:cacheprovider -o faulthandler_timeout=240 -m gpu "$2"
  local rc=$? result
  result=$(grep -E '^(=+ )?([0-9]+ (x?passed|x?failed|skipped|deselected|errors?|warnings?)|no tests ran)' \
    "$OUT_DIR/pytest_$1.log" | tail -1)
  [ "$rc" -eq 0 ] && ! [[ $result =~ (^|[ =])[0-9]+\ passed ]] && rc="1 (no test passed)"
  echo "pytest $1: rc $rc $result"
}

# The test folders side by side, each within the stage's limit; on a GPU under 100 GiB the models folder after the
# others have ended, within what is left of the limit then (the others within 2/3 of it; on an H100 with the kernel
# cache the first wave took 254 s, the models folder 113 s after it).
# Only the folders OELLM_TEST_FOLDERS names run (all by default); the models folder waits only for folders that run.
stage_tests() {
  local limit=$LIMIT_S models_limit=$LIMIT_S start=$SECONDS two_waves=0
  [ "$SMALL_GPU" = 1 ] && wanted models && [[ $TEST_FOLDERS != models ]] && two_waves=1
  [ "$two_waves" = 1 ] && limit=$((LIMIT_S * 2 / 3))
  wanted layers && gpu_pytest layers tests/unit_tests/layers "$limit" &
  wanted patches && gpu_pytest patches tests/unit_tests/patches "$limit" &
  wanted backends && gpu_pytest backends tests/unit_tests/backends "$limit" &
  wanted training && gpu_pytest training tests/unit_tests/training "$limit" &
  wanted bench && gpu_pytest bench tests/unit_tests/bench "$limit" &
  if [ "$two_waves" = 1 ]; then
    wait
    models_limit=$((LIMIT_S - (SECONDS - start)))
    [ "$models_limit" -ge 1 ] || models_limit=1
    echo "(models after the other folders, on a GPU of $gpu_mib MiB, within ${models_limit} s)"
  fi
  wanted models && PARITY_REPORT="$OUT_DIR/parity.md" gpu_pytest models tests/unit_tests/models "$models_limit" &
  wait
}

# "iteration N lm loss: X" of every iteration in Megatron logs.
iteration_losses() {
  grep -hE " iteration +[0-9]+/" "$@" | sed -E 's/.*(iteration +[0-9]+).*(lm loss: [^|]*).*/\1 \2/'
}

# The same, at a few iterations of one log.
loss_lines() {
  iteration_losses "$1" | grep -E "^iteration +(1|2|3|10|20|29|30) "
}

# The first exception line of a failed run's log (rank 0's, or the launcher's), so the summary says why it stopped.
first_error() {
  grep -m1 -E "^(\[rank[0-9]+\]: )?[A-Za-z_.]*(Error|Exception): " "$1" | cut -c1-300
}

# Build the corpus $2 (an output prefix) of at most $3 MB, its log $1, and print its summary line. Fails when the
# build did, so that the stage stops: a warm machine keeps an earlier call's corpus, which its runs would train on.
build_corpus() {
  run_bounded "$1" "$LIMIT_S" python3 tools/build_corpus.py --output-prefix "$2" --max-mb "$3" --overwrite
  local rc=$?
  echo "corpus ${2##*/} (tools/build_corpus.py): rc $rc $(first_error "$1")"
  return "$rc"
}

# How many checkpoint loads the Megatron log $1 reports.
checkpoints_loaded() {
  grep -c 'successfully loaded checkpoint' "$1"
}

# The rc to report for a resume run that returned $1, its log $2: one that returned 0 but loaded no checkpoint
# trained from scratch, a failure whatever it returned.
resume_rc() {
  if [ "$1" -eq 0 ] && [ "$(checkpoints_loaded "$2")" -eq 0 ]; then
    echo "1 (no checkpoint loaded)"
  else
    echo "$1"
  fi
}

stage_train() {
  rm -rf "$WORK/runs"  # a warm machine keeps /tmp: never resume from an earlier call's checkpoint
  build_corpus "$OUT_DIR/corpus.log" "$WORK/corpus/stdlib" 16 || return
  local data=(--output-dir "$WORK/runs" --data-path "$WORK/corpus/stdlib" --tokenizer-model byte)
  local qwen35=(bash examples/oellm/qwen3_5_35b_a3b_mn5_strong.sh --local --row 1 "${data[@]}" --save-interval 30)
  run_bounded "$OUT_DIR/train_qwen3.log" $((LIMIT_S / 2)) \
    bash examples/oellm/qwen3_30b_a3b_mn5.sh --local --row 1 "${data[@]}" --train-iters 30 &
  local qwen3_pid=$! started=$SECONDS
  run_bounded "$OUT_DIR/train.log" $((LIMIT_S * 2 / 3)) "${qwen35[@]}" --train-iters 30
  echo "train qwen3.5: rc $? $(first_error "$OUT_DIR/train.log")"
  # the resume gets the rest of the stage's limit (at least a minute): its final save slows down when the tests
  # stage shares the machine
  local left=$((LIMIT_S - (SECONDS - started)))
  run_bounded "$OUT_DIR/resume.log" $((left > 60 ? left : 60)) "${qwen35[@]}" --train-iters 35
  local rc=$?
  rc=$(resume_rc "$rc" "$OUT_DIR/resume.log")
  echo "resume qwen3.5: rc $rc $(grep -cE ' iteration +[0-9]+/' "$OUT_DIR/resume.log") iteration lines," \
    "first $(grep -oE ' iteration +[0-9]+/' "$OUT_DIR/resume.log" | head -1 | tr -s ' ') $(first_error "$OUT_DIR/resume.log")"
  wait "$qwen3_pid"
  echo "train qwen3 (recipe qwen3_30b_a3b_mn5 --local): rc $?" \
    "$(grep -cE ' iteration +[0-9]+/' "$OUT_DIR/train_qwen3.log") iteration lines $(first_error "$OUT_DIR/train_qwen3.log")"
  loss_lines "$OUT_DIR/train_qwen3.log"
  # the log of a run killed during iteration 16: everything before that iteration's line
  sed '/ iteration  *16\//,$d' "$OUT_DIR/train.log" > "$OUT_DIR/train_truncated.log"
  # dated an hour back, as the log of a job killed then: written a moment ago and minutes after its last line, the copy
  # reads as a job that may still be running ('ends at iteration 15/30 ...: still running, or killed without a message')
  touch -d '-1 hour' "$OUT_DIR/train_truncated.log"
  run_bounded "$OUT_DIR/table.md" "$LIMIT_S" \
    python3 -m megatron.oellm table "$OUT_DIR/train.log" "$OUT_DIR/train_truncated.log" --gpus-per-node 1 --window 3-30
  echo "table of the qwen3.5 logs: rc $?"
  echo "train qwen3.5 (recipe qwen3_5_35b_a3b_mn5_strong --local):"
  loss_lines "$OUT_DIR/train.log"
  cat "$OUT_DIR/table.md"
}

stage_resume() {
  rm -rf "$WORK/short"  # a warm machine keeps /tmp: never resume from an earlier call's checkpoint
  build_corpus "$OUT_DIR/short_corpus.log" "$WORK/corpus/small" 4 || return
  local run=(bash examples/oellm/qwen3_5_35b_a3b_mn5_strong.sh --local --row 1 --output-dir "$WORK/short"
    --data-path "$WORK/corpus/small" --tokenizer-model byte --save-interval 3)
  run_bounded "$OUT_DIR/short_first.log" $((LIMIT_S / 2)) "${run[@]}" --train-iters 6
  echo "first run (save at 3 and 6): rc $? $(first_error "$OUT_DIR/short_first.log")"
  run_bounded "$OUT_DIR/short_resume.log" $((LIMIT_S / 2)) "${run[@]}" --train-iters 8
  local rc=$?
  rc=$(resume_rc "$rc" "$OUT_DIR/short_resume.log")
  echo "resumed run to 8: rc $rc; loaded: $(checkpoints_loaded "$OUT_DIR/short_resume.log")"
  iteration_losses "$OUT_DIR/short_first.log" "$OUT_DIR/short_resume.log"
  grep -E "Error|error:" "$OUT_DIR/short_resume.log" | tail -3
}

stage_interrupt() {
  rm -rf "$WORK/interrupt"
  build_corpus "$OUT_DIR/interrupt_corpus.log" "$WORK/corpus/interrupt" 4 || return
  # the waits fit the stage's limit: two thirds of it to reach iteration 3 (on a fresh H100 sharing the GPU, about
  # 210 s of compiling and autotuning), a sixth (at most 120 s; 8 s were needed) to stop, then the check's own
  # clean-up (10 s, under KILL_AFTER_S)
  local grace=$((LIMIT_S / 6 < 120 ? LIMIT_S / 6 : 120))
  run_bounded "$OUT_DIR/interrupt_check.log" "$LIMIT_S" \
    python3 tools/check_interrupt.py --log "$OUT_DIR/interrupt.log" \
    --after-iteration 3 --start-timeout $((LIMIT_S * 2 / 3)) --grace $((grace > 1 ? grace : 1)) -- \
    bash examples/oellm/qwen3_5_35b_a3b_mn5_strong.sh --local --row 1 --output-dir "$WORK/interrupt" \
    --data-path "$WORK/corpus/interrupt" --tokenizer-model byte --train-iters 100000
  echo "interrupt (Ctrl-C at iteration 3 of a --local run): rc $?"
  cat "$OUT_DIR/interrupt_check.log"
  grep -m1 "passed on to" "$OUT_DIR/interrupt.log"
}

stage_bench() {
  run_bounded "$OUT_DIR/bench.log" "$LIMIT_S" \
    python3 -m megatron.oellm bench --mbs "$BENCH_MBS" --sides "${OELLM_BENCH_SIDES:-ours,hf}" --warmup 2 --steps 6 \
    --output "$OUT_DIR/bench.json" --profile "$OUT_DIR/profile"
  echo "bench: rc $?"
  tail -25 "$OUT_DIR/bench.log"
}

# the stages ignore Ctrl-C and SIGTERM (their runs do not): they go on to print each stopped run's rc for the summary
for stage in "${selected[@]}"; do
  { trap '' INT TERM; "stage_$stage"; } > "$OUT_DIR/stage_$stage.txt" 2>&1 &
  stage_pids+=($!)
done
wait
summarise
# a stage that removed OUT_DIR leaves no summary: that fails the acceptance, as it cannot say what ran
if [ ! -f "$OUT_DIR/summary.txt" ]; then
  echo "acceptance failed: $OUT_DIR/summary.txt is missing (OUT_DIR removed during the run?)" >&2
  exit 1
fi
# every run's summary line reads "...: rc N ..."; a non-zero one fails the acceptance
failed=$(grep -cE ': rc [1-9][0-9]*' "$OUT_DIR/summary.txt")
if [ "$failed" -gt 0 ]; then
  echo "acceptance failed: $failed run(s) with a non-zero rc" | tee -a "$OUT_DIR/summary.txt" >&2
  exit 1
fi
