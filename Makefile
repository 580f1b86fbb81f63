# flashpp: one front end for building, benchmarking and testing.
#   make bench      build, then run flashpp-bench's standard grid on the best device present
#   make test       build, then run the C++ test suites (CTest) and the Python tests
#   make gpu-check  on a machine with an NVIDIA GPU: build, GPU tests, sanitizer, benchmark vs torch
#                   (GPU_CHECK_ARGS="--quick --fwd-only" etc.: see tools/gpu_check.sh)
#   make ring-gpu-check  on a machine with 2 GPUs: ring attention checks and scaling
#                   (RING_CHECK_ARGS="--deadline 540": see tools/ring_gpu_check.sh)
#   make decode-check  on a GPU machine: KV-cache decoding / varlen tests, sanitizer and benchmarks
#                   (DECODE_CHECK_ARGS="--quick --deadline 300": see tools/decode_gpu_check.sh)
# Variables: BUILD (build dir, default build), JOBS (parallel jobs, default all cores),
#            CUDA (AUTO|ON|OFF, default AUTO: the CUDA backend is built when nvcc is found).

BUILD ?= build
JOBS ?= $(shell nproc)
CUDA ?= AUTO
CMAKE_ARGS ?=

.PHONY: all deps configure build bench test test-cpp test-python gpu-check ring-gpu-check decode-check clean

all: build

deps:
	@bash tools/install_deps.sh

configure: deps
	@cmake -S . -B $(BUILD) -G Ninja -DCMAKE_BUILD_TYPE=Release -DFLASHPP_CUDA=$(CUDA) $(CMAKE_ARGS) > $(BUILD).configure.log 2>&1 \
	  || (cat $(BUILD).configure.log; exit 1)
	@grep -E "flashpp:" $(BUILD).configure.log || true

build: configure
	@cmake --build $(BUILD) -j $(JOBS)

bench: build
	@$(BUILD)/tools/flashpp-bench

test-cpp: build
	@ctest --test-dir $(BUILD) -j $(JOBS) --output-on-failure --timeout 1500

test-python: deps
	@if [ -x tools/python_test.sh ]; then bash tools/python_test.sh; else echo "python tests: none yet"; fi

test: test-cpp test-python

gpu-check:
	@bash tools/gpu_check.sh $(GPU_CHECK_ARGS)

ring-gpu-check:
	@bash tools/ring_gpu_check.sh $(RING_CHECK_ARGS)

decode-check:
	@bash tools/decode_gpu_check.sh $(DECODE_CHECK_ARGS)

clean:
	rm -rf $(BUILD) $(BUILD).configure.log
