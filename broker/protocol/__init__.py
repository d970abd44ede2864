"""The Samsa wire protocol (version 0), sans-IO: it imports nothing of the
server, the storage or the clients.

* message.py: messages and message sets, their bytes;
* compression.py: gzip, lz4, zstd codecs of wrapper messages;
* framing.py: length-prefixed frames in and out;
* api.py: requests and responses, encoded and decoded;
* errors.py: error codes and the codec's exceptions;
* scram.py: SCRAM-SHA-512's exchange (client and server) and stored credential;
* _speedups.c: the optional C accelerator of message.py (walk, decode).
"""
