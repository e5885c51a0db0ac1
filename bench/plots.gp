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
