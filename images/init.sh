#!/bin/busybox sh
# /init of the harness initramfs.  Four serial ports, each with one job (the host side is
# harness/transport/qemu.py, MachineConfig.command):
#   ttyS0 (ISA 0x3f8)        the kernel console: the kernel's log and nothing else
#   ttyS1 (ISA 0x2f8)        the dump port: raw file contents for "dump"
#   PCI 00:1e.0 (pci-serial) the control channel: the line protocol below, only /init's
#   PCI 00:1f.0 (pci-serial) program output: "ID HEX" lines (32 bytes a line), "ID ." at its end
# No program inherits a descriptor of the console, the control channel or the dump port: each
# runs with stdin /dev/null and stdout and stderr on a FIFO that a forwarder frames onto the
# output port, so a program can neither forge a control line nor swallow one (output without a
# newline, binary garbage and floods all stay inside its own frames).  Once open, the device
# nodes of all four ports and /dev/console are removed.
#
# What is not defended: a root program can mknod the nodes again (or write the UARTs' I/O
# ports, /dev/port, /dev/mem) and then write anything anywhere; the harness trusts the kernel
# and /init, not the programs' privileges.  /dev/kmsg stays writable, but what a program writes
# there carries a user facility (the kernel refuses facility 0 from user space), and the host
# reads panics only from facility-0 records (console_msg_format=syslog prints the facility).
#
# Every reply on the control channel starts with "@@H ".  The harness sends (PROG, ARGS, PATH
# and CMD are words: one token each, decoded by words() below; ID, DELAY, SIZE, MODE are plain):
#   run ID PROG ARGS...      start PROG in the background; reply "@@H pid ID PID" and, when it
#                            ends, "@@H exit ID STATUS" (128+N for a signal N); its output goes
#                            to the output port as ID's frames
#   dump ID PATH             copy PATH raw to the dump port; reply "@@H dumped ID SIZE"
#   later ID DELAY PROG ARGS...  as run, but PROG starts DELAY seconds later and there is no pid
#                            reply (the waiting subshell's pid is in /tmp/.later.ID)
#   sh ID CMD                run a shell command (output framed as ID's); reply "@@H done ID STATUS"
#   recv ID SIZE MODE PATH   read SIZE bytes of base64 text from the control channel into PATH
#                            (decoded, chmod MODE); reply "@@H done ID STATUS"
#   poweroff                 power the guest off
/bin/busybox --install -s /bin
export PATH=/bin
mount -t proc proc /proc
mount -t sysfs sysfs /sys
mount -t devtmpfs devtmpfs /dev 2>/dev/null
mount -t tmpfs tmpfs /tmp
echo 0 > /proc/sys/kernel/kptr_restrict
echo -1 > /proc/sys/kernel/perf_event_paranoid 2>/dev/null
echo 0 > /proc/sys/kernel/randomize_va_space 2>/dev/null

port() {  # the ttyS name of the pci-serial device at PCI address $1
  for t in /sys/class/tty/ttyS*; do
    case "$(readlink -f "$t/device")" in
      */0000:00:$1|*/0000:00:$1/*) echo "${t##*/}"; return ;;
    esac
  done
}
ctl=$(port 1e.0)
out=$(port 1f.0)
if [ -z "$ctl" ] || [ -z "$out" ]; then
  # No control channel to say it on: the kernel's log is the only way out (the host's wait for
  # readiness times out with this line in its tail).
  echo "<2>harness init: no control or output port (ctl='$ctl' out='$out'):" \
    $(for t in /sys/class/tty/ttyS*; do echo "${t##*/}=$(readlink -f "$t/device")"; done) > /dev/kmsg
  sleep 5
  poweroff -f
fi
stty -F /dev/$ctl -echo 2>/dev/null
stty -F /dev/$out raw -echo 2>/dev/null
stty -F /dev/ttyS1 raw -echo 2>/dev/null
# fd 0 and 1: the control channel; fd 2: the kernel's log as user records; fd 3: the dump port
# (it stays open: closing a tty waits for its output to drain, which would leave init blocked in
# the kernel, and current on the vCPU, long after a dump was announced); fd 4: the output port.
# Nothing of /init's keeps the console open.
exec 0<"/dev/$ctl" 1>"/dev/$ctl" 2>/dev/kmsg 3>/dev/ttyS1 4>"/dev/$out"
rm -f /dev/console /dev/ttyS*

frames() {  # copy stdin to the output port as "ID HEX" lines, then "ID ."
  hexdump -v -e "\"$1 \" 32/1 \"%02x\" \"\\n\"" >&4
  echo "$1 ." >&4
}

# words TOKEN...: the words of a command, as the host wrote them (harness/transport/channels.py,
# encode_word): each token is one word, its bytes other than letters, digits and _./,:=@+-
# written \xHH, the empty word ''.  Sets w_1 .. w_N and words to '"$w_1" ... "$w_N"', for
# eval "set -- $words": each word whole, whatever bytes it holds (spaces, quotes, $, `, ;, *,
# newlines), and never read by the shell again.  The caller splits the line with globbing off
# (set -f): a token holds no space and no byte the shell would expand.
words() {
  words=
  n=0
  for t; do
    n=$((n + 1))
    case "$t" in
      "''") eval "w_$n=" ;;
      *\\*) w=$(printf '%bx' "$t"); eval "w_$n=\${w%x}" ;;  # the x keeps a trailing newline
      *) eval "w_$n=\$t" ;;
    esac
    words="$words \"\$w_$n\""
  done
}

echo "@@H ready $(uname -r) cpus=$(grep -c ^processor /proc/cpuinfo)"
while read -r cmd id rest; do
  case "$cmd" in
    run)
      set -f; words $rest; set +f
      eval "set -- $words"
      # The subshell starts the forwarder (hexdump itself: no shell of its own waiting while the
      # program runs) and the program, hands the program's pid over through a file, reports its
      # exit, and ends its output once the forwarder has seen EOF (the program and everything
      # that inherited its stdout are gone).  The pid is announced once the program has exec'd
      # (its exe is no longer busybox), so the harness never samples the shell that is about to
      # become the program.
      rm -f /tmp/.pid.$id /tmp/.out.$id
      mkfifo /tmp/.out.$id
      (
        exec hexdump -v -e "\"$id \" 32/1 \"%02x\" \"\\n\"" < /tmp/.out.$id >&4 &
        fwd=$!
        "$@" </dev/null >/tmp/.out.$id 2>&1 3>&- 4>&- &
        echo $! > /tmp/.pid.$id
        wait $!
        echo "@@H exit $id $?"
        wait $fwd
        echo "$id ." >&4
      ) </dev/null 3>&- &
      while [ ! -s /tmp/.pid.$id ]; do usleep 1000; done
      pid=$(cat /tmp/.pid.$id)
      while [ -e /proc/$pid ] && [ "$(readlink /proc/$pid/exe)" = /bin/busybox ]; do usleep 1000; done
      rm -f /tmp/.out.$id /tmp/.pid.$id
      echo "@@H pid $id $pid"
      ;;
    later)
      set -f; words $rest; set +f
      eval "set -- $words"
      delay=$1
      shift
      # As run, but the program starts after DELAY seconds and no pid is waited for: the harness
      # sets breakpoints meanwhile.  The subshell's pid is in /tmp/.later.ID (the program is the
      # child of its child: the harness ends it through that).
      rm -f /tmp/.out.$id
      mkfifo /tmp/.out.$id
      (
        exec hexdump -v -e "\"$id \" 32/1 \"%02x\" \"\\n\"" < /tmp/.out.$id >&4 &
        fwd=$!
        sleep "$delay"
        "$@" </dev/null >/tmp/.out.$id 2>&1 3>&- 4>&- &
        prog=$!
        rm -f /tmp/.out.$id
        wait $prog
        echo "@@H exit $id $?"
        wait $fwd
        echo "$id ." >&4
      ) </dev/null 3>&- &
      echo $! > /tmp/.later.$id
      ;;
    dump)
      set -f; words $rest; set +f
      cat "$w_1" > /tmp/.dump 2>/dev/null
      size=$(wc -c < /tmp/.dump)
      cat /tmp/.dump >&3
      rm -f /tmp/.dump
      echo "@@H dumped $id $size"
      ;;
    sh)
      rm -f /tmp/.out.$id
      mkfifo /tmp/.out.$id
      ( frames $id < /tmp/.out.$id ) </dev/null >/dev/null 3>&- &
      set -f; words $rest; set +f
      # In a subshell: the shell opens a simple command's redirections itself, before it forks,
      # and the FIFO's open waits for the reader above; a SIGCHLD meanwhile (a program's
      # subshell ending: "kill" just before) interrupts it, busybox ash does not retry, and the
      # command never ran: "can't create /tmp/.out.ID: Interrupted system call", status 1.  The
      # subshell has no children to be signalled for (tests/unit/images/test_init_script.py).
      ( exec sh -c "$w_1" </dev/null >/tmp/.out.$id 2>&1 3>&- 4>&- )
      status=$?
      rm -f /tmp/.out.$id
      echo "@@H done $id $status"
      ;;
    recv)
      set -f; words $rest; set +f
      eval "set -- $words"
      # head -c reads SIZE bytes and no more: the tty is canonical, so each read() returns at
      # most one line, and the base64 text ends with a newline.
      head -c "$1" | base64 -d > "$3" && chmod "$2" "$3"
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
echo "@@H control channel closed"
poweroff -f
