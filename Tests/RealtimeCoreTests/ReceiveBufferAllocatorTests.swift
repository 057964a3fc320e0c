import NIOConcurrencyHelpers
import NIOCore
@_spi(RealtimeEngine) @testable import RealtimeCore
import RealtimeTesting
import Testing

/// What a connection's channel keeps for reading: NIO's own per-channel pool of receive buffers
/// (`NIOPooledRecvBufferAllocator`, the type a socket channel reads through), driven the way a
/// stream channel drives it (one buffer per read, filled up to its capacity while the socket has
/// more, `record(actualReadBytes:)` after each read), with a consumer that holds the bytes of a
/// burst until it is over.
@Suite("Receive buffers")
struct ReceiveBufferAllocatorTests {
    /// One read of up to `available` bytes; returns the buffer read into.
    static func read(_ available: Int, _ pool: inout NIOPooledRecvBufferAllocator) -> ByteBuffer {
        let (buffer, bytesRead) = pool.buffer(allocator: ByteBufferAllocator()) { buffer -> Int in
            let count = min(available, buffer.writableBytes)
            buffer.writeRepeatingByte(0x61, count: count)
            return count
        }
        pool.record(actualReadBytes: bytesRead)
        return buffer
    }

    /// A burst of `reads` reads that each fill their buffer, every buffer held until the burst is
    /// over (the frames built from it are still in flight); returns the largest buffer read into.
    static func burst(_ reads: Int, _ pool: inout NIOPooledRecvBufferAllocator) -> Int {
        var held: [ByteBuffer] = []
        for _ in 0..<reads { held.append(read(1 << 20, &pool)) }
        return held.map(\.capacity).max() ?? 0
    }

    @Test("After a burst the channel keeps one buffer of the initial size, however large the burst's were")
    func shrinksBackAfterABurst() {
        var pool = NIOPooledRecvBufferAllocator(capacity: 1, recvAllocator: ReceiveBufferAllocator(initial: 2048, maximum: 65_536))
        #expect(Self.read(100, &pool).capacity == 2048)
        let largest = Self.burst(40, &pool)
        #expect(largest == 65_536, "the burst's reads grew to the maximum")
        // Quiet now: the pool holds one buffer, the initial one.
        #expect(pool.count == 1)
        // Small reads: the size halves after every two, and the kept buffer is the one read into
        // once the size is back at the initial one.
        var capacities: [Int] = []
        for _ in 0..<12 { capacities.append(Self.read(100, &pool).capacity) }
        #expect(capacities.last == 2048)
        #expect(capacities == capacities.sorted(by: >), "never grows while the reads are small: \(capacities)")
        #expect(pool.count == 1)
    }

    /// The sizes every WebSocket channel uses (`ReceiveBufferAllocator()`, set by
    /// `WebSocketClientChannel`): a quiet connection keeps one buffer of 512 bytes, before and after
    /// a burst of full 64 KiB reads (Docs/Architecture.md).
    @Test("The channel's allocator: a quiet connection keeps 512 bytes, before and after a burst")
    func theChannelsDefaultKeeps512Bytes() {
        var pool = NIOPooledRecvBufferAllocator(capacity: 1, recvAllocator: ReceiveBufferAllocator())
        #expect(Self.read(100, &pool).capacity == 512)
        #expect(Self.burst(40, &pool) == 65_536, "the burst's reads grew to 64 KiB")
        var capacities: [Int] = []
        for _ in 0..<16 { capacities.append(Self.read(100, &pool).capacity) }
        // Seven halvings, one per two small reads.
        #expect(capacities.last == 512, "\(capacities)")
        #expect(pool.count == 1)
    }

    /// The same on a live WebSocket connection (Reliability.md): after a burst of four 128 KiB
    /// messages, a quiet connection reads into 512 bytes again, one read per wake-up. The event
    /// stream's twin is `EventStreamConnectionTests.aQuietStreamReadsInto512BytesAgainAfterABurst`.
    @Test("A WebSocket connection reads into 512 bytes again once a burst is over", .timeLimit(.minutes(1)))
    func aQuietWebSocketReadsInto512BytesAgain() async throws {
        let server = try await WebSocketEchoServer.start()
        defer { Task { await server.stop() } }
        typealias Reading = (nextSize: Int, readsPerWakeUp: UInt)
        let readings = NIOLockedValueBox<[Reading?]>([])
        try await WebSocketTransport.connect(to: server.webSocketBaseURL + "/ws") { connection in
            let writer = try #require(connection.loopWriter)
            var inbound = connection.inbound.makeAsyncIterator()
            try await connection.send(text: "hello")
            _ = try await inbound.next()
            let before = try await writer.receiveBuffer()
            for _ in 0..<4 { try await connection.send(text: "!send 131072") }
            for _ in 0..<4 { _ = try await inbound.next() }
            let grown = try await writer.receiveBuffer()
            // Quiet again: small messages, each read on its own (the next is sent once the last came back).
            for index in 0..<20 {
                try await connection.send(text: "\(index)")
                #expect(try await inbound.next() == .text("\(index)"))
            }
            let after = try await writer.receiveBuffer()
            readings.withLockedValue { $0 = [before, grown, after] }
            try await connection.close()
        }
        let (before, grown, after) = try readings.withLockedValue { readings in
            try #require(readings.count == 3)
            return (try #require(readings[0]), try #require(readings[1]), try #require(readings[2]))
        }
        #expect(before.nextSize == 512 && before.readsPerWakeUp == 1, "\(before)")
        #expect(grown.nextSize >= 16 * 1024, "the burst's reads grew the buffer: \(grown)")
        #expect(after.nextSize == 512 && after.readsPerWakeUp == 1, "\(after)")
    }

    @Test("NIO's default keeps the buffers a burst grew (the reason for ReceiveBufferAllocator)")
    func defaultKeepsGrownBuffers() {
        // A socket channel's defaults: up to four buffers (maxMessagesPerRead), adaptive sizes
        // from 2 KiB to 64 KiB. If this starts failing, NIO shrinks its buffers itself now and
        // the comment on ReceiveBufferAllocator needs another look.
        var pool = NIOPooledRecvBufferAllocator(capacity: 4, recvAllocator: AdaptiveRecvByteBufferAllocator())
        _ = Self.read(100, &pool)
        _ = Self.burst(40, &pool)
        #expect(pool.count == 4)
        var capacities: [Int] = []
        for _ in 0..<40 { capacities.append(Self.read(100, &pool).capacity) }
        #expect(capacities.min() ?? 0 >= 32_768, "the kept buffers stay large: \(capacities.prefix(8))")
    }

    @Test("Sizes: double after a full read, halve after two reads that used less than half, within the bounds")
    func sizes() {
        var allocator = ReceiveBufferAllocator(initial: 1024, maximum: 8192)
        #expect(allocator.nextSize == 1024)
        #expect(allocator.record(actualReadBytes: 1024) == true)
        #expect(allocator.nextSize == 2048)
        _ = allocator.record(actualReadBytes: 2048)
        _ = allocator.record(actualReadBytes: 4096)
        _ = allocator.record(actualReadBytes: 8192)
        #expect(allocator.nextSize == 8192, "not past the maximum")
        _ = allocator.record(actualReadBytes: 100)
        #expect(allocator.nextSize == 8192, "one small read is not enough")
        _ = allocator.record(actualReadBytes: 5000)
        _ = allocator.record(actualReadBytes: 100)
        #expect(allocator.nextSize == 8192, "a read over half in between starts the count again")
        _ = allocator.record(actualReadBytes: 100)
        #expect(allocator.nextSize == 4096)
        _ = allocator.record(actualReadBytes: 10)
        _ = allocator.record(actualReadBytes: 10)
        _ = allocator.record(actualReadBytes: 10)
        #expect(allocator.record(actualReadBytes: 10) == false, "back at the initial size: the kept buffer is used")
        #expect(allocator.nextSize == 1024)
        _ = allocator.record(actualReadBytes: 10)
        _ = allocator.record(actualReadBytes: 10)
        #expect(allocator.nextSize == 1024, "not under the initial size")
        #expect(allocator.nextBufferSize() == nil)
    }
}
