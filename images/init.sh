#!/bin/busybox sh
# /init of the harness initramfs.  It speaks a line protocol on the console (ttyS0); every line
# it writes for the harness starts with "@@H ".  The harness sends:
#   run ID PROG ARGS...   start PROG in the background; reply "@@H pid ID PID" and, when it
#                         ends, "@@H exit ID STATUS" (128+N for a signal N)
#   dump ID PATH          copy PATH raw to the dump port (ttyS1); reply "@@H dumped ID SIZE"
#   sh ID CMD...          run a shell command; reply "@@H done ID STATUS"
#   poweroff              power the guest off
/bin/busybox --install -s /bin
export PATH=/bin
mount -t proc proc /proc
mount -t sysfs sysfs /sys
mount -t devtmpfs devtmpfs /dev 2>/dev/null
mount -t tmpfs tmpfs /tmp
echo 0 > /proc/sys/kernel/kptr_restrict
echo -1 > /proc/sys/kernel/perf_event_paranoid 2>/dev/null
echo 0 > /proc/sys/kernel/randomize_va_space 2>/dev/null
stty -F /dev/ttyS0 -echo 2>/dev/null
stty -F /dev/ttyS1 raw -echo 2>/dev/null
# The dump port stays open on fd 3: closing a tty waits for its output to drain, which would
# leave init blocked in the kernel (and current on the vCPU) long after a dump was announced.
exec 3>/dev/ttyS1
echo "@@H ready $(uname -r) cpus=$(grep -c ^processor /proc/cpuinfo)"
while read -r cmd id rest; do
  case "$cmd" in
    run)
      set -- $rest
      # The subshell starts the program, hands its pid over through a file and reports its
      # exit.  The pid is announced once the program has exec'd (its exe is no longer busybox),
      # so the harness never samples the shell that is about to become the program.
      rm -f /tmp/.pid.$id
      ( "$@" </dev/null & echo $! > /tmp/.pid.$id; wait $!; echo "@@H exit $id $?" ) &
      while [ ! -s /tmp/.pid.$id ]; do usleep 1000; done
      pid=$(cat /tmp/.pid.$id)
      while [ -e /proc/$pid ] && [ "$(readlink /proc/$pid/exe)" = /bin/busybox ]; do usleep 1000; done
      echo "@@H pid $id $pid"
      ;;
    dump)
      cat "$rest" > /tmp/.dump 2>/dev/null
      size=$(wc -c < /tmp/.dump)
      cat /tmp/.dump >&3
      rm -f /tmp/.dump
      echo "@@H dumped $id $size"
      ;;
    sh)
      sh -c "$rest"
      echo "@@H done $id $?"
      ;;
    poweroff)
      poweroff -f
      ;;
    "")
      ;;
    *)
      echo "@@H error $id unknown command $cmd"
      ;;
  esac
done
echo "@@H console closed"
poweroff -f
