# SPDX-License-Identifier: MIT
# An allocation-heavy Perl workload for bench/run.py: hashes of strings, arrays, sort.
use strict;
use warnings;
my $n = shift // 200000;
my %h;
for my $i (0 .. $n - 1) {
    my $k = sprintf("key%07d", ($i * 7919) % $n);
    $h{$k} = [ $i, "v" x (1 + $i % 40), { id => $i } ];
}
my @keys = sort { $h{$a}[0] <=> $h{$b}[0] } keys %h;
my $total = 0;
$total += length($h{$_}[1]) for @keys[0 .. $#keys / 2];
my @words = map { join(",", split(//, substr($_, 3, 4))) } @keys;
print "keys=", scalar(@keys), " total=$total words=", scalar(@words), "\n";
