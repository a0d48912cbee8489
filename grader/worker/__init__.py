"""The worker: the process that imports a student's module and answers the harness's requests, its zygote, the
supervisor that starts and watches it, and the protocol they speak."""
