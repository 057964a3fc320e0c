@_spi(RealtimeEngine) import RealtimeCore
@testable import SignalRHub
import RealtimeTesting
import Testing

/// Stateful reconnect's replay buffer: its byte limit (a send past it waits for acknowledgements),
/// what a resend carries, and duplicate suppression, without sockets.
@Suite("ReplayBuffer")
struct ReplayBufferTests {
    @Test("At the byte limit a send waits before it is recorded; an Ack that frees room admits it; a failed connection fails it")
    func byteLimitAndBackpressure() async throws {
        let buffer = ReplayBuffer(limit: 100)
        #expect(buffer.admit(60) == nil)
        #expect(try buffer.record(Array(repeating: 1, count: 60)))
        // 60 bytes held, under the limit: admitted, and it takes the buffer past the limit.
        #expect(buffer.admit(60) == nil)
        #expect(try buffer.record(Array(repeating: 2, count: 60)))
        #expect(buffer.bufferedByteCount == 120)
        let waiter = try #require(buffer.admit(50), "120 bytes unacknowledged is past the 100-byte limit")
        #expect(buffer.bufferedByteCount == 120, "a waiting send is not recorded")
        let released = Task { try await waiter.value() }
        buffer.ack(1)
        try await released.value
        #expect(try buffer.record(Array(repeating: 3, count: 50)))
        #expect(buffer.bufferedByteCount == 110)

        let fourth = try #require(buffer.admit(10))
        buffer.fail(RealtimeError(.connectionClosed, "gone"))
        await #expect(throws: RealtimeError.self) { try await fourth.value() }
        #expect(throws: RealtimeError.self) { try buffer.record([5]) }
    }

    /// However many tasks send at once, the buffer holds the limit and one message more; the others
    /// wait, and are admitted in their order as Acks make room.
    @Test("Many sends at once: the buffer never holds more than the limit and one message; waiters go in order")
    func manySendersAtOnce() async throws {
        let buffer = ReplayBuffer(limit: 1_000)
        var waits: [OneShot<Void>] = []
        for index in 0..<100 {
            if let wait = buffer.admit(100) {
                waits.append(wait)
            } else {
                #expect(try buffer.record(Array(repeating: UInt8(index), count: 100)))
            }
        }
        #expect(buffer.bufferedByteCount == 1_000, "ten messages admitted, the tenth reaching the limit")
        #expect(waits.count == 90)
        let order = Recorder<Int>()
        for (index, wait) in waits.enumerated() {
            Task {
                try await wait.value()
                order.append(index)
            }
        }
        // Acknowledging the first five frees 500 bytes: five waiters are admitted, in order.
        buffer.ack(5)
        #expect(try await order.wait(count: 5).sorted() == [0, 1, 2, 3, 4])
        // "No sixth waiter is admitted" is an absence: sampled after a moment, not awaited.
        try await Task.sleep(for: .milliseconds(50))
        #expect(order.all.count == 5)
        buffer.ack(10)
        #expect(try await order.wait(count: 10).sorted() == Array(0..<10))
        buffer.fail(RealtimeError(.connectionClosed, "gone"))
    }

    @Test("While reconnecting nothing is written; the resend carries the unacknowledged messages and what came meanwhile")
    func resendPlan() async throws {
        let buffer = ReplayBuffer(limit: 1_000)
        _ = try buffer.record([1])
        _ = try buffer.record([2])
        buffer.ack(1)
        buffer.disconnected()
        #expect(try buffer.record([3]) == false)
        var written: [[UInt8]] = []
        let ack = try await buffer.resend({ [0xFF, UInt8($0)] }, write: { written.append($0) })
        #expect(written == [[0xFF, 2], [2], [3]], "Sequence(2), then messages 2 and 3")
        #expect(ack == nil)
        #expect(try buffer.record([4]))
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
