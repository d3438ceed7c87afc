#!/bin/bash
# Builds the probe's shaders (tensor-addressed loads: t*, plain workgroup-scope loads as the control: wg*)
# and the probe binary into .gpu-proto/cm2t/.
set -e
cd "$(dirname "$0")/../../.."
D=.gpu-proto/cm2t; mkdir -p $D; rm -f $D/*.spv
for cfg in "256 128 128 32" "256 128 256 32" "256 128 256 64" "256 256 128 64" "128 128 128 32" "256 128 128 64" "512 256 256 32"; do
  set -- $cfg
  for pf in 0 1; do
    def="-DWG=$1 -DBM=$2 -DBN=$3 -DBK=$4"; [ $pf = 1 ] && def="$def -DPF"
    glslangValidator -V --target-env vulkan1.3 $def bench/probes/cm2t/mm_t.comp -o /tmp/cm2t.spv >/dev/null
    python3 bench/probes/cm2t/nv2tensor.py /tmp/cm2t.spv $D/wg$1_m$2_n$3_k$4_t$pf.spv
  done
done
glslangValidator -V --target-env vulkan1.3 -DWG=256 -DBM=128 -DBN=128 -DBK=32 bench/probes/cm2t/mm_t.comp -o /tmp/cm2t.spv >/dev/null
python3 bench/probes/cm2/nv2khr.py /tmp/cm2t.spv $D/wg256_m128_n128_k32_plain.spv
g++ -O2 -std=c++17 -o $D/probe bench/probes/cm2t/probe.cpp -lvulkan
ls $D
