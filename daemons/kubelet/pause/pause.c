/*
 * The pod sandbox: holds the pod's network and IPC namespaces while app containers come and go.
 * It sleeps in pause(), reaps any zombie re-parented to it (it is PID 1 of the sandbox) and exits 0
 * on SIGTERM or SIGINT so that `docker stop` is instant.
 */
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

static void terminate(int signum) {
    (void)signum;
    _exit(0);
}

static void reap(int signum) {
    (void)signum;
    while (waitpid(-1, NULL, WNOHANG) > 0) {
    }
}

int main(void) {
    struct sigaction stop = {0};
    struct sigaction child = {0};

    stop.sa_handler = terminate;
    sigemptyset(&stop.sa_mask);
    if (sigaction(SIGTERM, &stop, NULL) < 0 || sigaction(SIGINT, &stop, NULL) < 0) {
        return 1;
    }
    child.sa_handler = reap;
    sigemptyset(&child.sa_mask);
    child.sa_flags = SA_NOCLDSTOP | SA_RESTART;
    if (sigaction(SIGCHLD, &child, NULL) < 0) {
        return 2;
    }
    for (;;) {
        pause();
    }
    return 0;
}
