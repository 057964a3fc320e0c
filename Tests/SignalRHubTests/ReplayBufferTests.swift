@_spi(RealtimeEngine) import RealtimeCore
@testable import SignalRHub
import RealtimeTesting
import Testing

/// Stateful reconnect's bookkeeping over the connection's outbox: its byte limit (a send past it
/// waits for acknowledgements), what a resume puts back in line, and duplicate suppression, without
/// sockets. "Writing" here is what the WebSocket writer does with a batch it wrote.
@Suite("ReplayBuffer")
struct ReplayBufferTests {
    static func outbox() -> Outbox<HubFrame> { Outbox(window: ResendWindow(frames: .max, bytes: .max)) }

    /// Takes everything queued and settles it as written; returns it.
    @discardableResult
    static func write(_ outbox: Outbox<HubFrame>, _ buffer: ReplayBuffer) -> [HubFrame] {
        guard let batch = outbox.takeNow(maxBytes: .max, generation: outbox.generation) else { return [] }
        outbox.wroteUnconfirmed(batch)
        buffer.written(batch[...], in: outbox)
        outbox.finishedWrite()
        return batch
    }

    @Test("At the byte limit a send waits before it is queued; an Ack that frees room admits it; a failed connection fails it")
    func byteLimitAndBackpressure() async throws {
        let buffer = ReplayBuffer(limit: 100)
        let outbox = Self.outbox()
        #expect(buffer.admit(60) == nil)
        try buffer.enqueue(Array(repeating: 1, count: 60), in: outbox)
        // 60 bytes held, under the limit: admitted, and it takes the buffer past the limit.
        #expect(buffer.admit(60) == nil)
        try buffer.enqueue(Array(repeating: 2, count: 60), in: outbox)
        #expect(buffer.bufferedByteCount == 120)
        #expect(Self.write(outbox, buffer).map(\.sequenceId) == [1, 2])
        let waiter = try #require(buffer.admit(50), "120 bytes unacknowledged is past the 100-byte limit")
        #expect(buffer.bufferedByteCount == 120, "a waiting send is not queued")
        let released = Task { try await waiter.value() }
        buffer.acknowledge(1, in: outbox)
        try await released.value
        try buffer.enqueue(Array(repeating: 3, count: 50), in: outbox)
        #expect(buffer.bufferedByteCount == 110)
        #expect(outbox.queuedCount == 1)

        let fourth = try #require(buffer.admit(10))
        buffer.fail(RealtimeError(.connectionClosed, "gone"))
        await #expect(throws: RealtimeError.self) { try await fourth.value() }
        #expect(throws: RealtimeError.self) { try buffer.enqueue([5], in: outbox) }
    }

    /// However many tasks send at once, the buffer holds the limit and one message more; the others
    /// wait, and are admitted in their order as Acks make room.
    @Test("Many sends at once: the buffer never holds more than the limit and one message; waiters go in order")
    func manySendersAtOnce() async throws {
        let buffer = ReplayBuffer(limit: 1_000)
        let outbox = Self.outbox()
        var waits: [OneShot<Void>] = []
        for index in 0..<100 {
            if let wait = buffer.admit(100) {
                waits.append(wait)
            } else {
                try buffer.enqueue(Array(repeating: UInt8(index), count: 100), in: outbox)
            }
        }
        #expect(buffer.bufferedByteCount == 1_000, "ten messages admitted, the tenth reaching the limit")
        #expect(waits.count == 90)
        Self.write(outbox, buffer)
        let order = Recorder<Int>()
        for (index, wait) in waits.enumerated() {
            Task {
                try await wait.value()
                order.append(index)
            }
        }
        // Acknowledging the first five frees 500 bytes: five waiters are admitted, in order.
        buffer.acknowledge(5, in: outbox)
        #expect(try await order.wait(count: 5).sorted() == [0, 1, 2, 3, 4])
        // "No sixth waiter is admitted" is an absence: sampled after a moment, not awaited.
        try await Task.sleep(for: .milliseconds(50))
        #expect(order.all.count == 5)
        buffer.acknowledge(10, in: outbox)
        #expect(try await order.wait(count: 10).sorted() == Array(0..<10))
        buffer.fail(RealtimeError(.connectionClosed, "gone"))
    }

    @Test("A resume puts Sequence and the unacknowledged messages back in line before what was queued meanwhile")
    func resumeRewindsTheOutbox() throws {
        let buffer = ReplayBuffer(limit: 1_000)
        let outbox = Self.outbox()
        try buffer.enqueue([1], in: outbox)
        try buffer.enqueue([2], in: outbox)
        Self.write(outbox, buffer)
        buffer.acknowledge(1, in: outbox)
        buffer.disconnected()
        #expect(buffer.isReconnecting)
        try buffer.enqueue([3], in: outbox)
        let ack = buffer.resume(outbox, sequenceMessage: { [0xFF, UInt8($0)] })
        #expect(ack == nil)
        #expect(!buffer.isReconnecting)
        // An Ack of 2 that arrives while 2 waits in line again frees it once it is written.
        buffer.acknowledge(2, in: outbox)
        #expect(buffer.bufferedByteCount == 2)
        let batch = Self.write(outbox, buffer)
        #expect(batch.map(\.bytes) == [[0xFF, 2], [2], [3]], "Sequence(2), then messages 2 and 3")
        #expect(batch.map(\.sequenceId) == [0, 2, 3], "the Sequence message is not numbered")
        #expect(buffer.bufferedByteCount == 1, "2 was acknowledged; 3 is kept")
        // Nothing unacknowledged: the Sequence carries the next number.
        buffer.acknowledge(3, in: outbox)
        buffer.disconnected()
        _ = buffer.resume(outbox, sequenceMessage: { [0xFF, UInt8($0)] })
        #expect(Self.write(outbox, buffer).map(\.bytes) == [[0xFF, 4]])
    }

    @Test("An Ack that came due while reconnecting is handed out by the resume")
    func ackDueWhileReconnecting() {
        let buffer = ReplayBuffer(limit: 1_000)
        let outbox = Self.outbox()
        let message = HubMessage.invocation(HubInvocation(target: "x"))
        #expect(buffer.receive(message).process)
        buffer.disconnected()
        #expect(buffer.takeAck() == nil, "no Ack while the socket is gone")
        #expect(buffer.resume(outbox, sequenceMessage: { _ in [] }) == 1)
    }

    @Test("Duplicates replayed by the peer after its Sequence are dropped")
    func duplicates() throws {
        let buffer = ReplayBuffer(limit: 1_000)
        let message = HubMessage.invocation(HubInvocation(target: "x"))
        #expect(buffer.receive(message).process)
        #expect(buffer.receive(message).process)
        buffer.disconnected()
        #expect(buffer.receive(message).process == false, "nothing before the peer's Sequence")
        #expect(buffer.receive(.sequence(sequenceId: 1)).process)
        try buffer.sequence(1)
        #expect(buffer.receive(message).process == false, "1 again")
        #expect(buffer.receive(message).process == false, "2 again")
        #expect(buffer.receive(message).process, "3 is new")
        #expect(throws: RealtimeError.self) { try buffer.sequence(10) }
    }
}
