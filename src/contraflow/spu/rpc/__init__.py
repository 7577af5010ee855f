"""The SPU's framed, multiplexed connection, for both ends: a client's (`client`: correlation
ids, reconnects; its socket side in `wire`) and a server's (`server`: frames dispatched as concurrent
tasks, replies written in any order, sendfile for large reads), the process-wide limits both
doors share (`budget`), and engine exceptions as wire errors (`errors`). The SPU, the
controller and every client talk through it; the frames themselves are `spu.protocol`'s.
"""
