import RealtimeCore
@testable import SignalRHub
import Testing

/// Stateful reconnect's replay buffer: its byte limit (a send past it waits for acknowledgements),
/// what a resend carries, and duplicate suppression, without sockets.
@Suite("ReplayBuffer")
struct ReplayBufferTests {
    @Test("Past the byte limit a send waits; an Ack that frees room releases it; a failed connection fails it")
    func byteLimitAndBackpressure() async throws {
        let buffer = ReplayBuffer(limit: 100)
        #expect(buffer.record(Array(repeating: 1, count: 60)).wait == nil)
        let (sendNow, wait) = buffer.record(Array(repeating: 2, count: 60))
        #expect(sendNow)
        let waiter = try #require(wait, "120 bytes unacknowledged is past the 100-byte limit")
        #expect(buffer.bufferedByteCount == 120)
        let released = Task { try await waiter.value() }
        buffer.ack(1)
        try await released.value
        #expect(buffer.bufferedByteCount == 60)

        let third = try #require(buffer.record(Array(repeating: 3, count: 50)).wait)
        buffer.fail(RealtimeError(.connectionClosed, "gone"))
        await #expect(throws: RealtimeError.self) { try await third.value() }
    }

    @Test("While reconnecting nothing is written; the resend carries the unacknowledged messages and what came meanwhile")
    func resendPlan() async throws {
        let buffer = ReplayBuffer(limit: 1_000)
        _ = buffer.record([1])
        _ = buffer.record([2])
        buffer.ack(1)
        buffer.disconnected()
        #expect(buffer.record([3]).sendNow == false)
        var written: [[UInt8]] = []
        let ack = try await buffer.resend({ [0xFF, UInt8($0)] }, write: { written.append($0) })
        #expect(written == [[0xFF, 2], [2], [3]], "Sequence(2), then messages 2 and 3")
        #expect(ack == nil)
        #expect(buffer.record([4]).sendNow)
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
