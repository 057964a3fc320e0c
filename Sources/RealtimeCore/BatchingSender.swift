public import DequeModule
public import NIOConcurrencyHelpers

/// Serialises sends over a request/response channel (HTTP POST) and batches what arrives while a
/// request is in flight.
///
/// At most one `post` runs at a time. Items sent meanwhile are collected and go out together in the
/// next `post`, limited to `maxBatchSize` by the `size` function. Each `send` returns when the batch
/// holding its item was posted, or throws that batch's error: nothing is dropped unseen.
///
/// `send` and the batch loop are `@inlinable` so that a client module specialises them for its item
/// type: unspecialised, every send looked up generic metadata for its state (profiled at about 5% of
/// a sequential SignalR round trip).
public final class BatchingSender<Item: Sendable>: Sendable {
    @usableFromInline enum Role: Sendable { case sent, post }
    @usableFromInline struct Pending: Sendable {
        @usableFromInline let item: Item
        /// nil for the entry of the sender that is posting it.
        @usableFromInline var continuation: CheckedContinuation<Role, any Error>?
        @inlinable init(item: Item, continuation: CheckedContinuation<Role, any Error>?) {
            self.item = item
            self.continuation = continuation
        }
    }
    @usableFromInline struct State: Sendable {
        @usableFromInline var pending: Deque<Pending> = []
        @usableFromInline var posting = false
        @inlinable init() {}
    }

    @usableFromInline let state = NIOLockedValueBox(State())
    @usableFromInline let maxBatchSize: Int
    @usableFromInline let size: @Sendable (Item) -> Int
    @usableFromInline let post: @Sendable ([Item]) async throws -> Void

    /// - Parameters:
    ///   - maxBatchSize: the largest sum of `size` in one batch; a single larger item goes alone.
    ///   - size: the size of one item as it counts against `maxBatchSize`.
    ///   - post: sends one batch; throwing fails every `send` in it.
    public init(
        maxBatchSize: Int = .max,
        size: @escaping @Sendable (Item) -> Int = { _ in 1 },
        post: @escaping @Sendable ([Item]) async throws -> Void
    ) {
        self.maxBatchSize = maxBatchSize
        self.size = size
        self.post = post
    }

    /// How many items wait for the next batch.
    public var pendingCount: Int { state.withLockedValue { $0.pending.count } }

    /// Sends `item` in the next batch. The caller that finds the channel idle posts one batch
    /// (its own item first) and hands the role to the oldest waiting caller, so no caller works
    /// for others forever and no background task is needed.
    @inlinable
    public func send(_ item: Item) async throws {
        let role: Role = try await withCheckedThrowingContinuation { continuation in
            let postNow = state.withLockedValue { state -> Bool in
                if state.posting {
                    state.pending.append(Pending(item: item, continuation: continuation))
                    return false
                }
                state.posting = true
                state.pending.append(Pending(item: item, continuation: nil))
                return true
            }
            if postNow { continuation.resume(returning: .post) }
        }
        if case .post = role { try await postOneBatch() }
    }

    @inlinable
    func postOneBatch() async throws {
        let batch = state.withLockedValue { state -> [Pending] in
            var batch: [Pending] = []
            var total = 0
            while let first = state.pending.first {
                let itemSize = size(first.item)
                if !batch.isEmpty && total + itemSize > maxBatchSize { break }
                batch.append(state.pending.removeFirst())
                total += itemSize
            }
            return batch
        }
        var failure: (any Error)?
        do {
            try await post(batch.map { $0.item })
            for entry in batch { entry.continuation?.resume(returning: .sent) }
        } catch {
            failure = error
            for entry in batch { entry.continuation?.resume(throwing: error) }
        }
        let next = state.withLockedValue { state -> CheckedContinuation<Role, any Error>? in
            guard !state.pending.isEmpty else {
                state.posting = false
                return nil
            }
            defer { state.pending[0].continuation = nil }
            return state.pending[0].continuation
        }
        next?.resume(returning: .post)
        if let failure { throw failure }
    }
}
