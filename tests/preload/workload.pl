# SPDX-License-Identifier: MIT
# A hash- and string-heavy perl workload for the preload test. Deterministic.
use strict;
use warnings;

my %h;
my $seed = 42;
sub rnd { $seed = ($seed * 1103515245 + 12345) % 2147483648; return $seed; }

for my $i (0 .. 199999) {
    my $k = "key" . rnd() % 100000 . "-" . ($i % 113);
    $h{$k} .= sprintf("%d:%x;", $i, rnd());
}
my @keys = sort keys %h;
my $total = 0;
$total += length($h{$_}) for @keys;
print "keys ", scalar(@keys), " total ", $total, " first $keys[0] last $keys[-1]\n";

my $big = join(",", map { $_ . "=" . length($h{$_}) } @keys);
print "big ", length($big), " sum ", unpack("%32C*", $big), "\n";

my %count;
for my $w (split /[,=;:]/, $big) {
    $count{substr($w, 0, 4)}++;
}
my @top = (sort { $count{$b} <=> $count{$a} || $a cmp $b } keys %count)[0 .. 9];
print "top ", join(" ", map { "$_=$count{$_}" } @top), "\n";

my @arr;
for my $i (1 .. 300000) {
    push @arr, reverse(uc("abc" x ($i % 9))) . $i;
    splice(@arr, 0, 500) if @arr > 2000;
}
print "arr ", scalar(@arr), " sum ", unpack("%32C*", join("", @arr)), "\n";

my $s = "";
for my $i (1 .. 100000) {
    $s .= chr(65 + $i % 26);
    $s =~ s/(ABC)+$/x/ if $i % 97 == 0;
}
print "s ", length($s), " ", unpack("%32C*", $s), "\n";
delete $h{$_} for grep { /7/ } @keys;
print "left ", scalar(keys %h), "\n";
