# The resolved-address axis: CPU per connection to a resolved address and the
# cost of adding one, vs addresses held, one line per enforcer (medians, 95% CI).
# gnuplot -e "dat='DIR'; out='PREFIX'" bench/plots_dns.gp
set terminal pngcairo size 1100,500 noenhanced
set output out."-resolved.png"
set logscale x
set xrange [5:200000]
set xlabel "resolved addresses held for the sandbox"
set key below
set grid
set multiplot layout 1,2
set title "CPU per connect+accept+close to a resolved address (client)"
set ylabel "us"
plot dat."/resolved.dat" using ($1*0.95):2:3:4 with yerrorlines title "none", \
     ""                  using 1:5:6:7 with yerrorlines title "nftables (timeout set)", \
     ""                  using ($1*1.05):8:9:10 with yerrorlines title "egressd (egr_resolved_v1)"
set title "adding one resolved address"
set logscale y
set ylabel "us"
plot dat."/resolved.dat" using ($1*0.97):11:12:13 with yerrorlines title "egressd (one map write)", \
     ""                  using ($1*1.03):14:15:16 with yerrorlines title "nftables (one transaction, libnftables)"
unset multiplot
