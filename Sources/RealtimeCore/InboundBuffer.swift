import NIOConcurrencyHelpers

/// The hand-off from a connection to the one task that consumes what it receives.
///
/// The connection (on its event loop) hands over everything one read produced in one call; a
/// consumer that waits is woken once for the whole batch. The consumer's iterator takes every
/// buffered element in one step and walks them locally, with no lock and no hop per element. So
/// however many messages a read carries, they cost one wake-up when the consumer keeps up, and none
/// when it is behind.
///
/// Backpressure: once `limit` elements wait, ``yield(contentsOf:)`` answers `false`; the connection
/// stops reading and `onDemand` is called when the consumer has taken them. What is held is at most
/// `limit` plus one read's worth waiting, and as much again in the consumer's batch.
package final class InboundBuffer<Element: Sendable>: Sendable {
    private struct State {
        var items: [Element] = []
        var consumer: CheckedContinuation<[Element]?, any Error>?
        var finished = false
        var failure: (any Error)?
        var producerPaused = false
        var onDemand: (@Sendable () -> Void)?
    }

    private let state = NIOLockedValueBox(State())
    /// How many elements may wait before the producer is asked to pause.
    package let limit: Int

    package init(limit: Int) {
        self.limit = max(1, limit)
    }

    // MARK: Producer

    /// Called (outside the lock, once) when the consumer took the elements after a producer was told
    /// to pause. The producer that was told to pause sets it before pausing.
    package func setOnDemand(_ onDemand: (@Sendable () -> Void)?) {
        state.withLockedValue { $0.onDemand = onDemand }
    }

    /// Hands `elements` to the consumer (waking it if it waits). Returns whether the producer may go
    /// on; `false` means pause until `onDemand` is called. Ignored once finished.
    @discardableResult
    package func yield(contentsOf elements: some Collection<Element>) -> Bool {
        guard !elements.isEmpty else { return !isPaused }
        let (consumer, batch, goOn) = state.withLockedValue { state -> (CheckedContinuation<[Element]?, any Error>?, [Element], Bool) in
            if state.finished { return (nil, [], true) }
            if let consumer = state.consumer {
                state.consumer = nil
                var batch = state.items
                state.items = []
                batch.append(contentsOf: elements)
                return (consumer, batch, true)
            }
            state.items.append(contentsOf: elements)
            if state.items.count >= limit {
                state.producerPaused = true
                return (nil, [], false)
            }
            return (nil, [], true)
        }
        consumer?.resume(returning: batch)
        return goOn
    }

    /// Hands one element over; see ``yield(contentsOf:)``.
    @discardableResult
    package func yield(_ element: Element) -> Bool { yield(contentsOf: CollectionOfOne(element)) }

    /// Whether the producer was told to pause and the consumer has not taken the elements yet.
    package var isPaused: Bool { state.withLockedValue { $0.producerPaused } }

    /// Ends the sequence: the consumer gets what is buffered, then the end (or `error`).
    package func finish(throwing error: (any Error)? = nil) {
        let consumer = state.withLockedValue { state -> CheckedContinuation<[Element]?, any Error>? in
            if state.finished { return nil }
            state.finished = true
            state.failure = error
            defer { state.consumer = nil }
            return state.consumer
        }
        guard let consumer else { return }
        // A parked consumer means nothing is buffered.
        if let error {
            state.withLockedValue { $0.failure = nil }
            consumer.resume(throwing: error)
        } else {
            consumer.resume(returning: nil)
        }
    }

    package var isFinished: Bool { state.withLockedValue { $0.finished } }

    /// Whether the consumer waits for elements now.
    package var hasWaitingConsumer: Bool { state.withLockedValue { $0.consumer != nil } }

    // MARK: Consumer

    /// Everything buffered, waiting while nothing is; nil at the end; throws the finishing error
    /// after the elements sent before it, or `CancellationError` when the consumer's task is
    /// cancelled while it waits.
    private enum Take { case batch([Element], demand: (@Sendable () -> Void)?), end, failure(any Error), wait }

    package func nextBatch() async throws -> [Element]? {
        func take(_ state: inout State) -> Take {
            if !state.items.isEmpty {
                let batch = state.items
                state.items = []
                let demand = state.producerPaused ? state.onDemand : nil
                state.producerPaused = false
                return .batch(batch, demand: demand)
            }
            guard state.finished else { return .wait }
            if let failure = state.failure {
                state.failure = nil
                return .failure(failure)
            }
            return .end
        }
        switch state.withLockedValue({ take(&$0) }) {
        case .batch(let batch, let demand):
            demand?()
            return batch
        case .end: return nil
        case .failure(let error): throw error
        case .wait: break
        }
        return try await withTaskCancellationHandler {
            try await withCheckedThrowingContinuation { continuation in
                let now = state.withLockedValue { state -> Take in
                    let step = take(&state)
                    guard case .wait = step else { return step }
                    if Task.isCancelled { return .failure(CancellationError()) }
                    state.consumer = continuation
                    return .wait
                }
                switch now {
                case .batch(let batch, let demand):
                    demand?()
                    continuation.resume(returning: batch)
                case .end: continuation.resume(returning: nil)
                case .failure(let error): continuation.resume(throwing: error)
                case .wait: break
                }
            }
        } onCancel: {
            self.state.withLockedValue { state in
                defer { state.consumer = nil }
                return state.consumer
            }?.resume(throwing: CancellationError())
        }
    }

    /// An iterator that walks each batch locally.
    package struct Iterator {
        let buffer: InboundBuffer<Element>
        private var batch: [Element] = []
        private var index = 0

        package init(_ buffer: InboundBuffer<Element>) { self.buffer = buffer }

        package mutating func next() async throws -> Element? {
            if index < batch.count {
                defer { index += 1 }
                return batch[index]
            }
            batch = []
            index = 0
            guard let next = try await buffer.nextBatch() else { return nil }
            batch = next
            index = 1
            return batch[0]
        }
    }
}
