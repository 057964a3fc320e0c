package import NIOCore

/// The receive buffers of a connection's channel: small while the connection is quiet, larger
/// while data keeps arriving, and small again once a burst is over.
///
/// NIO reads into buffers its channel keeps for reuse, and a kept buffer is only ever grown: with
/// its default sizes (2 KiB at first, doubled after every read that fills the buffer, up to
/// 64 KiB) and up to four kept buffers, a connection that once received a burst keeps up to
/// 256 KiB for the rest of its life. Measured with heaptrack on 1,000 idle WebSocket connections
/// that had each received four 128 KiB messages: 134 KiB of receive buffers held per connection,
/// against 2 KiB before the burst.
///
/// With this allocator and one read per wake-up (`ChannelOptions.maxMessagesPerRead` 1, which
/// `WebSocketClientChannel` sets), the channel keeps one buffer of ``initial`` bytes. A read that fills
/// the buffer doubles the next one (up to ``maximum``), two reads in a row that use less than
/// half of it halve it (down to ``initial``); a buffer larger than ``initial`` is used for one
/// read only and freed once the bytes read into it are consumed. A quiet connection therefore
/// holds ``initial`` bytes whatever it received before.
package struct ReceiveBufferAllocator: RecvByteBufferAllocator {
    package let initial: Int
    package let maximum: Int
    private(set) package var nextSize: Int
    private var smallReads = 0

    package init(initial: Int = 512, maximum: Int = 64 * 1024) {
        precondition(initial > 0 && maximum >= initial)
        self.initial = initial
        self.maximum = maximum
        self.nextSize = initial
    }

    package func buffer(allocator: ByteBufferAllocator) -> ByteBuffer {
        allocator.buffer(capacity: nextSize)
    }

    /// nil: the channel's pool reuses its one kept buffer (of ``initial`` bytes) while
    /// `record(actualReadBytes:)` returns false, and takes a new buffer from `buffer(allocator:)`
    /// for one read, without keeping it, while it returns true.
    package func nextBufferSize() -> Int? { nil }

    /// Adapts the next buffer's size to this read; returns whether the next read needs a buffer of
    /// another size than the kept one.
    package mutating func record(actualReadBytes: Int) -> Bool {
        if actualReadBytes >= nextSize, nextSize < maximum {
            nextSize = min(maximum, nextSize * 2)
            smallReads = 0
        } else if actualReadBytes <= nextSize / 2, nextSize > initial {
            smallReads += 1
            if smallReads >= 2 {
                nextSize = max(initial, nextSize / 2)
                smallReads = 0
            }
        } else {
            smallReads = 0
        }
        return nextSize != initial
    }
}
