"""The machine the synthetic step runs on: Trn1 NeuronCore-v2 figures and the GPU-flavour host.

Rates are in units per nanosecond so that ``bytes / rate`` or ``flops / rate`` is a duration in ns
(1 byte/ns = 1 GB/s). Figures are public Trn1 numbers where they exist and plausible guesses
otherwise (marked "assumed").
"""

from __future__ import annotations

# ---- NeuronCore-v2 (trn1.32xlarge: 16 Trainium devices x 2 NeuronCores) ---------------------
INSTANCE_TYPE = "trn1.32xlarge"
CORES_PER_DEVICE = 2
TENSOR_PEAK_FLOPS_PER_NS = 95_000.0  # 95 TFLOP/s BF16 per NeuronCore
TENSOR_PEAK_FP32_FLOPS_PER_NS = 23_750.0  # FP32 at a quarter of the BF16 rate (47.5 per device)
MATMUL_EFFICIENCY = 0.85  # achieved fraction of peak on large tiles (assumed)
TENSOR_ROWS = TENSOR_COLS = 128
TENSOR_CLOCK_GHZ = 2.8  # 128 x 128 PEs x 2 flops x 2.8 GHz ~ 92 TFLOP/s
ENGINE_CLOCK_GHZ = 1.4  # vector, scalar, gpsimd, and the core clock (assumed)
LANES = 128  # vector / scalar / gpsimd channels
ELEMENTWISE_ELEMS_PER_NS = LANES * ENGINE_CLOCK_GHZ  # one element per lane per cycle
INSTRUCTION_OVERHEAD_NS = 64  # issue, semaphore check, pipeline fill (assumed)
TRIGGER_NS = 160  # a DMA or collective trigger instruction (assumed)
HBM_BYTES_PER_NS = 410.0  # 820 GB/s per Trainium device, shared by its 2 cores
NUM_DMA_ENGINES = 16

# ---- DMA queues ---------------------------------------------------------------------------
WEIGHT_QUEUE = "qSyncIO0"  # weights, triggered by the sync engine
ACTIVATION_QUEUE = "qVectorIO0"  # activation save/reload, triggered by the vector engine
QUEUE_BYTES_PER_NS = {WEIGHT_QUEUE: 50.0, ACTIVATION_QUEUE: 50.0}  # per queue (assumed)
QUEUE_INDEX = {WEIGHT_QUEUE: 0, ACTIVATION_QUEUE: 1}
DMA_QUEUE_LATENCY_NS = 1_500  # trigger end -> first byte moves (descriptor fetch, queueing)
DMA_TRANSFER_SETUP_NS = 500  # paid by every transfer (block) on its first packet
DMA_PACKET_OVERHEAD_NS = 20  # paid by every packet
DMA_PACKET_BYTES = 64 * 1024

# ---- collectives --------------------------------------------------------------------------
CC_BUS_BYTES_PER_NS = 90.0  # ring bus bandwidth per rank (assumed), below the 96 GB/s link peak
# of analysis/hardware.py's trn1: a transfer never outruns the peak it is compared with
CC_LATENCY_NS = 8_000  # last arrival -> transfer starts (handshake)
CC_STREAM = "cc0"

# ---- GPU flavour (the same step seen as a PyTorch job) -------------------------------------
GPUS_PER_HOST = 8
COMPUTE_STREAM = 7
COPY_STREAMS = {WEIGHT_QUEUE: 22, ACTIVATION_QUEUE: 23}
NCCL_STREAM = 28
CPU_OP_PRE_NS = 9_000  # Python + dispatcher before the launch call
LAUNCH_CALL_NS = 4_500  # cudaLaunchKernel
CPU_OP_POST_NS = 1_500
LAUNCH_LATENCY_NS = 2_500  # launch call returns -> kernel may start
MEMCPY_PRE_NS = 6_000
MEMCPY_CALL_NS = 3_500  # cudaMemcpyAsync
MEMCPY_POST_NS = 1_000
COLLECTIVE_PRE_NS = 20_000  # c10d work creation and record_param_comms
COLLECTIVE_POST_NS = 4_000
CROSS_STREAM_LATENCY_NS = 600  # cudaStreamWaitEvent resolution between streams
EVENT_RECORD_CALL_NS = 3_000  # cudaEventRecord after launching work another stream waits for
STREAM_WAIT_CALL_NS = 2_500  # cudaStreamWaitEvent before launching work that waits for it
DEVICE_SYNC_NS = 2_000  # cudaDeviceSynchronize returns after the GPU drains
