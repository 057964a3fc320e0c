import RealtimeCore
import Testing

@Suite struct BackoffTests {
    @Test func exponentialWithoutJitterDoublesUpToTheCap() {
        let policy = BackoffPolicy.exponential(initial: .seconds(1), maximum: .seconds(5), randomizationFactor: 0)
        let delays = (1...6).map { policy.delay(forAttempt: $0, random: 0.3) }
        #expect(delays == [.seconds(1), .seconds(2), .seconds(4), .seconds(5), .seconds(5), .seconds(5)])
    }

    @Test func jitterStaysWithinTheRandomizationFactor() {
        let policy = BackoffPolicy.exponential(initial: .seconds(2), maximum: .seconds(60), randomizationFactor: 0.5)
        // random < 0.5 subtracts, >= 0.5 adds, deviation = base * factor * random
        #expect(policy.delay(forAttempt: 1, random: 0.2) == .seconds(2 - 2 * 0.5 * 0.2))
        #expect(policy.delay(forAttempt: 1, random: 0.8) == .seconds(2 + 2 * 0.5 * 0.8))
        for random in stride(from: 0.0, to: 1.0, by: 0.05) {
            let delay = policy.delay(forAttempt: 3, random: random)!
            #expect(delay >= .seconds(4) && delay <= .seconds(12))
        }
    }

    @Test func capAppliesAfterJitter() {
        let policy = BackoffPolicy.exponential(initial: .seconds(4), maximum: .seconds(5), randomizationFactor: 0.5)
        #expect(policy.delay(forAttempt: 1, random: 0.99) == .seconds(5))
    }

    @Test func hugeAttemptNumbersDoNotOverflow() {
        let policy = BackoffPolicy.exponential(maximum: .seconds(5))
        #expect(policy.delay(forAttempt: 10_000, random: 0) == .seconds(5))
    }

    @Test func maxAttemptsGivesUp() {
        let policy = BackoffPolicy.exponential(randomizationFactor: 0, maxAttempts: 2)
        #expect(policy.delay(forAttempt: 2, random: 0) != nil)
        #expect(policy.delay(forAttempt: 3, random: 0) == nil)
    }

    @Test func fixedListThenStop() {
        let policy = BackoffPolicy.signalRDefault
        #expect((1...5).map { policy.delay(forAttempt: $0, random: 0.9) } == [.zero, .seconds(2), .seconds(10), .seconds(30), nil])
        #expect(BackoffPolicy.never.delay(forAttempt: 1) == nil)
    }

    @Test func customFunction() {
        let policy = BackoffPolicy.custom { attempt in attempt < 3 ? .milliseconds(attempt * 100) : nil }
        #expect(policy.delay(forAttempt: 1) == .milliseconds(100))
        #expect(policy.delay(forAttempt: 2) == .milliseconds(200))
        #expect(policy.delay(forAttempt: 3) == nil)
    }
}
