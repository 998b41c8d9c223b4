package main

import (
	"fmt"
	"os"
	"strconv"
)

//go:noinline
func leaf(n int) int {
	s := 0
	for i := 0; i < n; i++ {
		s += i * i % 7
	}
	return s
}

//go:noinline
func mid(n int) int { return leaf(n) + 1 }

//go:noinline
func top(n int) int { return mid(n) + 1 }

func main() {
	rounds := 1 << 30
	if len(os.Args) > 1 {
		rounds, _ = strconv.Atoi(os.Args[1])
	}
	t := 0
	for r := 0; r < rounds; r++ {
		t += top(100000)
	}
	fmt.Println(t)
}
