# Cost vs entries, one line per enforcer, medians with 95% intervals.
# gnuplot -e "dat='DIR'; out='PREFIX'" bench/plots.gp
set terminal pngcairo size 800,500 noenhanced
set logscale x
set xlabel "CIDR entries"
set key top left
set grid

set output out."-connect-cpu.png"
set ylabel "CPU per connect+accept+close (us, client)"
plot dat."/connect_cpu.dat" using ($1*0.95):2:3:4 with yerrorlines title "none", \
     ""                     using 1:5:6:7 with yerrorlines title "nftables", \
     ""                     using ($1*1.05):8:9:10 with yerrorlines title "egressd"

set output out."-apply.png"
set logscale y
set ylabel "apply a policy (s)"
plot dat."/apply.dat" using ($1*0.97):2:3:4 with yerrorlines title "nftables (nft -f)", \
     ""               using ($1*1.03):5:6:7 with yerrorlines title "egressd (sandbox add)"

# Cost vs sandboxes (the sandbox axis): memory per sandbox and apply time per sandbox.
set terminal pngcairo size 1100,500 noenhanced
set output out."-sandboxes.png"
set xrange [0.5:2000]
set key below
set xlabel "sandboxes"
set title "kernel memory per sandbox (deltas <= 0, the node's noise, not drawn)"
set ylabel "KiB"
set multiplot layout 1,2
plot dat."/sandboxes.dat" using ($1*0.97):2 with linespoints title "nftables (ruleset per pod netns)", \
     ""                   using ($1*1.03):3 with linespoints title "egressd (registered cgroup)"
set title "apply per sandbox (p50, 95% CI)"
set ylabel "s"
plot dat."/sandboxes.dat" using ($1*0.97):4:5:6 with yerrorlines title "nftables (nft -f)", \
     ""                   using ($1*1.03):7:8:9 with yerrorlines title "egressd (sandbox add)"
unset multiplot
