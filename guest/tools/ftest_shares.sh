#!/bin/sh
# Reads `callgrind_annotate` output on stdin; prints the Ir of ftest's functions and their
# shares of the ftest total (main+foo+bar+qux+random+random_r) and of the whole run.
awk '
/PROGRAM TOTALS/ { gsub(",", "", $1); total = $1 }
{
	fn = $NF; if (fn ~ /^\[/) fn = $(NF-1)
	sub(/^.*:/, "", fn)
	if (fn ~ /^(main|foo|bar|qux|random|random_r)$/ && !(fn in ir)) {
		v = $1; gsub(",", "", v); ir[fn] = v; sum += v
	}
}
END {
	printf "%-10s %12s %8s %8s\n", "function", "Ir", "ftest%", "total%"
	n = split("qux foo bar main random random_r", order, " ")
	for (i = 1; i <= n; i++) {
		f = order[i]
		printf "%-10s %12d %7.1f%% %7.1f%%\n", f, ir[f], 100 * ir[f] / sum, 100 * ir[f] / total
	}
	printf "%-10s %12d %7.1f%% %7.1f%%\n", "ftest", sum, 100, 100 * sum / total
	printf "%-10s %12d\n", "program", total
}'
