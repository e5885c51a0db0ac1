# Sourced by the profile scripts: write_axis_task FILE writes the sandbox
# axis's task declaration (bench/sandbox_axis.cc's: 100 CIDRs + 50 names).
write_axis_task() {
  {
    echo "egress:"
    echo "  allow:"
    for i in $(seq 0 99); do echo "    - 10.$((i / 256)).$((i % 256)).0/24"; done
    for i in $(seq 0 49); do echo "    - svc-$i.bench.example"; done
  } > "$1"
}
